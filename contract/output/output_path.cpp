#include "output/output_path.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cumemtrace::contract {

namespace {

// Refusals of a directory, as negative codes below every -errno.
constexpr int kWorldWritableDirectory = -100000;
constexpr int kSharedForeignDirectory = -100001;

}  // namespace

int directory_refusal(const struct stat& dir, uid_t user) {
  // Anyone may rename or replace what is in a world-writable directory
  // without the sticky bit (/tmp has it): the trace could be swapped after
  // it is written, or the directory's entries turned into symlinks.
  if ((dir.st_mode & S_IWOTH) != 0 && (dir.st_mode & S_ISVTX) == 0) return kWorldWritableDirectory;
  // Another user's directory that yet others (their group) may write to:
  // neither this user nor root controls what its entries become.
  if (dir.st_uid != user && dir.st_uid != 0 && (dir.st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
      (dir.st_mode & S_ISVTX) == 0) {
    return kSharedForeignDirectory;
  }
  return 0;
}

const char* trace_file_error(int code) {
  switch (code) {
    case kWorldWritableDirectory:
      return "its directory is writable by every user and has no sticky bit; set CUMEMTRACE_OUTPUT to a "
             "directory you own";
    case kSharedForeignDirectory:
      return "its directory belongs to another user and is writable by others; set CUMEMTRACE_OUTPUT to a "
             "directory you own";
    default:
      return std::strerror(-code);
  }
}

int create_trace_file(const std::string& path) {
  // The directory is opened first and checked through its descriptor, and
  // the file is created relative to it, so the directory checked is the one
  // written to, whatever is renamed in between.
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return -errno;
  struct stat st{};
  int result = ::fstat(dir_fd, &st) == 0 ? directory_refusal(st, ::geteuid()) : -errno;
  if (result == 0) {
    // O_EXCL | O_CREAT never follows a symlink at the final component and
    // never overwrites another run's trace; O_NOFOLLOW states the intent as well.
    const int fd = ::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    result = fd >= 0 ? fd : -errno;
  }
  ::close(dir_fd);
  return result;
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

}  // namespace cumemtrace::contract
