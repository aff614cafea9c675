#include "common/process_facts.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

namespace cumemtrace::preload {

std::string executable_path() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

std::vector<std::string> command_line() {
  std::vector<std::string> args;
  const int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return args;
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) all.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  std::size_t start = 0;
  while (start < all.size()) {
    const std::size_t nul = all.find('\0', start);
    const std::size_t end = nul == std::string::npos ? all.size() : nul;
    args.emplace_back(all, start, end - start);
    start = end + 1;
  }
  return args;
}

std::string host_name() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace cumemtrace::preload
