#include "output_path.h"

#include <fcntl.h>

#include <cerrno>

namespace cumemtrace::preload {

int create_trace_file(const std::string& path) {
  // O_EXCL | O_CREAT never follows a symlink at the final component and never
  // overwrites another run's trace; O_NOFOLLOW states the intent as well.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  return fd >= 0 ? fd : -errno;
}

std::string numbered_trace_path(const std::string& path, int n) {
  const std::size_t name_start = path.find_last_of('/') + 1;  // 0 when there is no '/'
  std::size_t ext = path.find(".jsonl", name_start);
  if (ext == std::string::npos && path.ends_with(".zst") && path.size() - 4 > name_start) {
    ext = path.size() - 4;
  }
  if (ext == std::string::npos || ext == name_start) ext = path.size();
  return path.substr(0, ext) + "." + std::to_string(n) + path.substr(ext);
}

int create_trace_file(std::string& path, bool numbered_if_taken) {
  int fd = create_trace_file(path);
  for (int n = 1; fd == -EEXIST && numbered_if_taken && n <= 1000; ++n) {
    const std::string candidate = numbered_trace_path(path, n);
    fd = create_trace_file(candidate);
    if (fd >= 0) path = candidate;
  }
  return fd;
}

}  // namespace cumemtrace::preload
