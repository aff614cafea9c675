// The trace file name template of TRACE_FORMAT.md ("File naming"), shared by
// the preload, which creates the file, and `cumemtrace run`, which tells the
// user where it went.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

namespace cumemtrace::contract {

struct TemplateValues {
  long pid = 0;
  std::string host;
  std::string rank;  // RANK, else LOCAL_RANK, else "0"
  std::optional<std::uint64_t> start_unix_ns;  // unknown to anyone but the traced process
};

// Host names and ranks come from the machine and the environment: reduced to
// characters that are safe in a file name, they cannot leave the directory.
inline std::string file_name_safe(std::string_view s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    out.push_back(ok ? c : '_');
  }
  return out.empty() ? std::string("_") : out;
}

// The rank of a process in a distributed job, from its environment.
inline std::string rank_from_environment() {
  for (const char* name : {"RANK", "LOCAL_RANK"}) {
    const char* v = std::getenv(name);
    if (v && *v) return v;
  }
  return "0";
}

// %p → pid, %h → host, %r → rank, %t → start time (UTC, 20261121T174929Z),
// %% → '%'; any other %x stays as written. nullopt if the template has %t
// and the start time is not known.
inline std::optional<std::string> expand_output_template(std::string_view tmpl,
                                                         const TemplateValues& v) {
  std::string out;
  out.reserve(tmpl.size() + 32);
  for (std::size_t i = 0; i < tmpl.size(); ++i) {
    if (tmpl[i] != '%' || i + 1 == tmpl.size()) {
      out.push_back(tmpl[i]);
      continue;
    }
    switch (tmpl[++i]) {
      case 'p': out += std::to_string(v.pid); break;
      case 'h': out += file_name_safe(v.host); break;
      case 'r': out += file_name_safe(v.rank); break;
      case 't': {
        if (!v.start_unix_ns) return std::nullopt;
        const std::time_t secs = static_cast<std::time_t>(*v.start_unix_ns / 1'000'000'000ull);
        std::tm tm{};
        gmtime_r(&secs, &tm);
        char buf[32];
        std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
        out += buf;
        break;
      }
      case '%': out.push_back('%'); break;
      default:
        out.push_back('%');
        out.push_back(tmpl[i]);
    }
  }
  return out;
}

}  // namespace cumemtrace::contract
