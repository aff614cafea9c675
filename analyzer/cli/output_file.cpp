#include "output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace cumemtrace::cli {

namespace {

bool write_all(int fd, std::string_view content) {
  while (!content.empty()) {
    ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    content.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

std::string failure(const std::string& path, int err) {
  return "cannot write " + path + ": " + std::strerror(err);
}

}  // namespace

std::string write_output(const std::string& path, std::string_view content) {
  if (path.empty() || path == "-") {
    if (!write_all(STDOUT_FILENO, content)) return failure("standard output", errno);
    return {};
  }
  std::string temp_template = path + ".tmp.XXXXXX";
  std::vector<char> temp(temp_template.begin(), temp_template.end());
  temp.push_back('\0');
  int fd = ::mkstemp(temp.data());
  if (fd < 0) return failure(path, errno);
  // mkstemp creates 0600; a report is an ordinary file, so honour the umask.
  mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  int err = 0;
  if (!write_all(fd, content)) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(temp.data(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(temp.data());
    return failure(path, err);
  }
  return {};
}

}  // namespace cumemtrace::cli
