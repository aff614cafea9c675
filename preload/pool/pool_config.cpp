// CUMEMTRACE_POOL_CONF: PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax, our keys.
#include "cumemtrace/pool/pool_config.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace cumemtrace::pool {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits on commas that are not inside [...] (roundup_power2_divisions'
// list form has commas of its own).
std::vector<std::string_view> split_entries(std::string_view text) {
  std::vector<std::string_view> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') ++depth;
    if (c == ']' && depth > 0) --depth;
    if (c == ',' && depth == 0) {
      std::string_view entry = trim(text.substr(start, i - start));
      if (!entry.empty()) out.push_back(entry);
      start = i + 1;
    }
  }
  return out;
}

bool parse_uint(std::string_view s, std::uint64_t* out) {
  s = trim(s);
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

bool parse_double(std::string_view s, double* out) {
  s = trim(s);
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(*out);
}

bool parse_bool(std::string_view s, bool* out) {
  std::string lower;
  for (char c : trim(s)) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (lower == "true" || lower == "1" || lower == "yes" || lower == "on") return *out = true, true;
  if (lower == "false" || lower == "0" || lower == "no" || lower == "off") return *out = false, true;
  return false;
}

// Sizes in MiB, as PyTorch writes them; guards the shift against overflow.
bool parse_mib(std::string_view s, std::size_t* out) {
  std::uint64_t mib = 0;
  if (!parse_uint(s, &mib) || mib > (kUnlimited >> 20)) return false;
  *out = static_cast<std::size_t>(mib) * kMiB;
  return true;
}

bool valid_divisions(std::uint64_t d) { return d <= 1 || (std::has_single_bit(d) && d <= 1024); }

// "4" (every interval) or "[256:1,512:2,>:4]": keys are the upper ends of
// power-of-two intervals in MiB; a value covers its interval and the unset
// intervals below it; ">" covers everything above the last key.
std::string parse_divisions(std::string_view value, PoolConfig& config) {
  auto& div = config.roundup_power2_divisions;
  value = trim(value);
  std::uint64_t single = 0;
  if (parse_uint(value, &single)) {
    if (!valid_divisions(single)) return "must be 0, 1 or a power of two up to 1024";
    div.fill(static_cast<std::uint32_t>(single));
    return {};
  }
  if (value.size() < 2 || value.front() != '[' || value.back() != ']')
    return "expected a number or a list like [256:1,512:2,>:4]";
  std::array<std::uint32_t, PoolConfig::kRoundupIntervals> parsed{};
  std::size_t next_unset = 0;
  for (std::string_view item : split_entries(value.substr(1, value.size() - 2))) {
    const auto colon = item.find(':');
    if (colon == std::string_view::npos) return "list entry '" + std::string(item) + "' has no ':'";
    std::string_view key = trim(item.substr(0, colon));
    std::uint64_t d = 0;
    if (!parse_uint(item.substr(colon + 1), &d) || !valid_divisions(d))
      return "list entry '" + std::string(item) + "': divisions must be 0, 1 or a power of two up to 1024";
    std::size_t last = PoolConfig::kRoundupIntervals - 1;
    if (key != ">") {
      std::uint64_t mib = 0;
      if (!parse_uint(key, &mib) || !std::has_single_bit(mib))
        return "list entry '" + std::string(item) + "': the key must be a power of two in MiB or '>'";
      last = std::min<std::size_t>(static_cast<std::size_t>(std::bit_width(mib) - 1), last);
    }
    if (last + 1 < next_unset) return "list keys must increase";
    for (std::size_t i = next_unset; i <= last; ++i) parsed[i] = static_cast<std::uint32_t>(d);
    next_unset = last + 1;
  }
  div = parsed;
  return {};
}

constexpr const char* kKnownKeys =
    "max_split_size_mb, max_non_split_rounding_mb, roundup_power2_divisions, "
    "garbage_collection_threshold, release_threshold_mb, expandable_segments, "
    "expandable_page_size_mb, segment_policy, device_shards";

// Applies one `key:value`; returns an error text, empty when it applied.
std::string apply(std::string_view key, std::string_view value, PoolConfig& c) {
  if (key == "max_split_size_mb") {
    std::size_t bytes = 0;
    // PyTorch's own bound: below the 20 MiB segment size the rule would stop
    // mid-size segments from ever being split.
    if (!parse_mib(value, &bytes) || bytes < 20 * kMiB) return "must be a whole number of MiB ≥ 20";
    c.max_split_size = bytes;
  } else if (key == "max_non_split_rounding_mb") {
    if (!parse_mib(value, &c.max_non_split_rounding)) return "must be a whole number of MiB";
  } else if (key == "roundup_power2_divisions") {
    return parse_divisions(value, c);
  } else if (key == "garbage_collection_threshold") {
    double t = 0;
    if (!parse_double(value, &t) || t <= 0.0 || t >= 1.0) return "must be a number between 0 and 1, exclusive";
    c.garbage_collection_threshold = t;
  } else if (key == "release_threshold_mb") {
    if (!parse_mib(value, &c.release_threshold)) return "must be a whole number of MiB";
  } else if (key == "expandable_segments") {
    if (!parse_bool(value, &c.expandable_segments)) return "must be true or false";
  } else if (key == "expandable_page_size_mb") {
    // A page is one handle of physical memory: past 1 GiB, one page would be
    // most of a small device.
    std::size_t bytes = 0;
    if (!parse_mib(value, &bytes) || bytes > 1024 * kMiB) return "must be a whole number of MiB from 0 to 1024";
    c.expandable_page_size = bytes;
  } else if (key == "segment_policy") {
    const std::string_view v = trim(value);
    if (v == "pytorch") c.segment_policy = SegmentPolicy::pytorch;
    else if (v == "tight") c.segment_policy = SegmentPolicy::tight;
    else return "must be 'pytorch' or 'tight'";
  } else if (key == "device_shards") {
    std::uint64_t n = 0;
    if (!parse_uint(value, &n) || n < 1 || n > 64) return "must be a whole number from 1 to 64";
    c.device_shards = static_cast<std::uint32_t>(n);
  } else {
    return std::string("unknown key (known: ") + kKnownKeys + ")";
  }
  return {};
}

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
}

}  // namespace

PoolConfigParse parse_pool_config(std::string_view text, const PoolConfig& base) {
  PoolConfigParse result;
  result.config = base;
  for (std::string_view entry : split_entries(text)) {
    const auto colon = entry.find(':');
    if (colon == std::string_view::npos) {
      result.errors.push_back("'" + std::string(entry) + "': expected key:value");
      continue;
    }
    const std::string_view key = trim(entry.substr(0, colon));
    const std::string_view value = trim(entry.substr(colon + 1));
    // Apply to a copy so that a half-parsed bad value leaves the default.
    PoolConfig candidate = result.config;
    std::string error = apply(key, value, candidate);
    if (error.empty()) {
      result.config = candidate;
    } else {
      result.errors.push_back(std::string(key) + ": '" + std::string(value) + "': " + error);
    }
  }
  return result;
}

std::vector<std::pair<std::string, ConfigValue>> describe_pool_config(const PoolConfig& c) {
  auto size_or_null = [](std::size_t v) -> ConfigValue {
    if (v == kUnlimited) return nullptr;
    return static_cast<std::uint64_t>(v);
  };
  std::string divisions = "[";
  for (std::size_t i = 0; i < c.roundup_power2_divisions.size(); ++i) {
    if (i) divisions += ',';
    divisions += std::to_string(c.roundup_power2_divisions[i]);
  }
  divisions += ']';
  return {
      {"max_split_size", size_or_null(c.max_split_size)},
      {"max_non_split_rounding", size_or_null(c.max_non_split_rounding)},
      {"roundup_power2_divisions", divisions},
      {"garbage_collection_threshold", c.garbage_collection_threshold},
      {"release_threshold", size_or_null(c.release_threshold)},
      {"expandable_segments", c.expandable_segments},
      {"expandable_page_size", static_cast<std::uint64_t>(c.expandable_page_size)},
      {"segment_policy", std::string(c.segment_policy == SegmentPolicy::tight ? "tight" : "pytorch")},
      {"device_shards", static_cast<std::uint64_t>(c.device_shards)},
  };
}

std::string pool_config_json(const PoolConfig& config) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : describe_pool_config(config)) {
    if (!first) out.push_back(',');
    first = false;
    append_json_string(out, key);
    out.push_back(':');
    std::visit(
        [&out](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::nullptr_t>) {
            out += "null";
          } else if constexpr (std::is_same_v<T, bool>) {
            out += v ? "true" : "false";
          } else if constexpr (std::is_same_v<T, std::uint64_t>) {
            out += std::to_string(v);
          } else if constexpr (std::is_same_v<T, double>) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.17g", v);
            out += buf;
          } else {
            append_json_string(out, v);
          }
        },
        value);
  }
  out.push_back('}');
  return out;
}

PoolConfig pytorch_pool_config() {
  PoolConfig c;
  c.segment_policy = SegmentPolicy::pytorch;
  c.expandable_segments = false;
  c.max_split_size = kUnlimited;
  return c;
}

}  // namespace cumemtrace::pool
