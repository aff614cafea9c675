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

}  // namespace cumemtrace::preload
