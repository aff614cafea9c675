#include "text/diagnostics.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>

namespace cumemtrace::contract {

void warn(const char* fmt, ...) {
  char line[512];
  static constexpr char kPrefix[] = "cumemtrace: warning: ";
  int n = std::snprintf(line, sizeof line, "%s", kPrefix);
  va_list args;
  va_start(args, fmt);
  const int body = std::vsnprintf(line + n, sizeof line - static_cast<unsigned>(n) - 1, fmt, args);
  va_end(args);
  if (body > 0) n += body;
  if (n > static_cast<int>(sizeof line) - 2) n = static_cast<int>(sizeof line) - 2;
  line[n++] = '\n';
  ssize_t ignored = ::write(STDERR_FILENO, line, static_cast<size_t>(n));
  (void)ignored;
}

}  // namespace cumemtrace::contract
