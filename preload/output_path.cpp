#include "output_path.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>

namespace cumemtrace::preload {
namespace {

std::string file_name_safe(std::string_view s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    out.push_back(ok ? c : '_');
  }
  return out.empty() ? std::string("_") : out;
}

std::string utc_timestamp(std::uint64_t unix_ns) {
  const std::time_t secs = static_cast<std::time_t>(unix_ns / 1'000'000'000ull);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

}  // namespace

std::string expand_output_template(std::string_view tmpl, const TemplateValues& v) {
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
      case 't': out += utc_timestamp(v.start_unix_ns); break;
      case '%': out.push_back('%'); break;
      default:
        out.push_back('%');
        out.push_back(tmpl[i]);
    }
  }
  return out;
}

std::string rank_from_environment() {
  for (const char* name : {"RANK", "LOCAL_RANK"}) {
    const char* v = std::getenv(name);
    if (v && *v) return v;
  }
  return "0";
}

int create_trace_file(const std::string& path) {
  // O_EXCL | O_CREAT never follows a symlink at the final component and never
  // overwrites another run's trace; O_NOFOLLOW states the intent as well.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  return fd >= 0 ? fd : -errno;
}

}  // namespace cumemtrace::preload
