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

namespace cumemtrace::cli {

StreamedOutput::~StreamedOutput() {
  stream_.reset();
  buffer_.reset();  // closes the descriptor
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

std::string StreamedOutput::open(const std::string& path) {
  int fd = -1;
  if (path.empty() || path == "-") {
    fd = ::dup(STDOUT_FILENO);  // the buffer closes its descriptor, never stdout itself
    if (fd < 0) return failure("standard output", errno);
  } else {
    std::string temp_template = path + ".tmp.XXXXXX";
    std::vector<char> temp(temp_template.begin(), temp_template.end());
    temp.push_back('\0');
    fd = ::mkstemp(temp.data());
    if (fd < 0) return failure(path, errno);
    mode_t mask = ::umask(0);  // as write_output: an ordinary file, honouring the umask
    ::umask(mask);
    ::fchmod(fd, 0666 & ~mask);
    path_ = path;
    temp_ = temp.data();
  }
  constexpr std::size_t kBufferBytes = std::size_t{1} << 16;
  buffer_ = std::make_unique<__gnu_cxx::stdio_filebuf<char>>(fd, std::ios::out, kBufferBytes);
  stream_ = std::make_unique<std::ostream>(buffer_.get());
  return {};
}

std::string StreamedOutput::commit() {
  const std::string shown = path_.empty() ? "standard output" : path_;
  errno = 0;
  stream_->flush();
  int err = stream_->good() ? 0 : (errno != 0 ? errno : EIO);
  if (buffer_->close() == nullptr && err == 0) err = errno != 0 ? errno : EIO;
  if (err == 0 && !temp_.empty() && ::rename(temp_.c_str(), path_.c_str()) != 0) err = errno;
  if (err != 0) return failure(shown, err);
  temp_.clear();
  return {};
}

std::string write_streamed(const std::string& path, const std::function<void(std::ostream&)>& write) {
  StreamedOutput output;
  if (std::string error = output.open(path); !error.empty()) return error;
  write(output.stream());
  return output.commit();
}

}  // namespace cumemtrace::cli
