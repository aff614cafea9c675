#include "output_file.h"

#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "output/output_template.h"
#include "output/output_path.h"
#include "pending/pending_log.h"

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

// Where the bytes for `path` go. A regular file (or a new one) is written
// beside itself under a temporary name and renamed over it when complete,
// so a failed run never leaves half a report; through a symlink, beside the
// file it names, so the link stays a link. Anything else that exists (a
// character device such as /dev/null, a FIFO, /dev/stdout) is opened and
// written in place: renaming over /dev/null, as root, once replaced the
// device with a regular file and broke every program on the machine that
// writes to it.
struct OutputTarget {
  int fd = -1;
  std::string temp;       // "" when written in place
  std::string rename_to;  // the regular file the temporary becomes
};

std::string open_target(const std::string& path, OutputTarget& target) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode)) return failure(path, EISDIR);
    target.fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (target.fd < 0) return failure(path, errno);
    return {};
  }
  target.rename_to = path;
  char resolved[PATH_MAX];
  struct stat link {};
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode) && ::realpath(path.c_str(), resolved) != nullptr) {
    target.rename_to = resolved;
  }
  std::string temp_template = target.rename_to + ".tmp.XXXXXX";
  std::vector<char> temp(temp_template.begin(), temp_template.end());
  temp.push_back('\0');
  target.fd = ::mkstemp(temp.data());
  if (target.fd < 0) return failure(path, errno);
  // mkstemp creates 0600; a report is an ordinary file, so honour the umask.
  mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(target.fd, 0666 & ~mask);
  target.temp = temp.data();
  return {};
}

}  // namespace

std::string write_output(const std::string& path, std::string_view content) {
  if (path.empty() || path == "-") {
    if (!write_all(STDOUT_FILENO, content)) return failure("standard output", errno);
    return {};
  }
  OutputTarget target;
  if (std::string error = open_target(path, target); !error.empty()) return error;
  int err = 0;
  if (!write_all(target.fd, content)) err = errno;
  if (::close(target.fd) != 0 && err == 0) err = errno;
  if (err == 0 && !target.temp.empty() && ::rename(target.temp.c_str(), target.rename_to.c_str()) != 0) err = errno;
  if (err != 0) {
    if (!target.temp.empty()) ::unlink(target.temp.c_str());
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
    OutputTarget target;
    if (std::string error = open_target(path, target); !error.empty()) return error;
    fd = target.fd;
    path_ = path;
    temp_ = target.temp;
    rename_to_ = target.rename_to;
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
  if (err == 0 && !temp_.empty() && ::rename(temp_.c_str(), rename_to_.c_str()) != 0) err = errno;
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

namespace cumemtrace::cli {

namespace {

// The values the library itself puts in a name (recorder.cpp), for this process.
contract::TemplateValues trace_name_values() {
  contract::TemplateValues values;
  values.pid = static_cast<long>(::getpid());
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) == 0) values.host = host;
  values.rank = contract::rank_from_environment();  // the program inherits our environment
  values.start_unix_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  return values;
}

std::string directory_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string trace_output_problem(const std::string& output_template) {
  const contract::TemplateValues values = trace_name_values();
  // Another pid and another second: what changes with them is not known
  // before the program runs.
  contract::TemplateValues other = values;
  other.pid += 1;
  *other.start_unix_ns += 86'401'000'000'000ull;
  const auto path = contract::expand_output_template(output_template, values);
  const auto other_path = contract::expand_output_template(output_template, other);
  if (!path || !other_path || directory_of(*path) != directory_of(*other_path)) return {};
  const bool fixed = *path == *other_path;
  const int fd = contract::create_trace_file(*path);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(path->c_str());
    return {};
  }
  // Our pid's name taken by an earlier process's trace says nothing about
  // the program's own name. (A fixed name that exists is refused before.)
  if (fd == -EEXIST && !fixed) return {};
  const std::string dir = directory_of(*path);
  struct stat st {};
  std::string why = contract::trace_file_error(fd);
  if (fd == -ENOENT && ::stat(dir.c_str(), &st) != 0) why = "the directory " + dir + " does not exist";
  if (fd == -ENOTDIR) why = dir + " is not a directory";
  return "cannot create the trace file " + *path + (fixed ? "" : " (" + output_template + " for this process)") +
         ": " + why;
}

std::string trace_file_pattern(const std::string& output_template) {
  const contract::TemplateValues values = trace_name_values();
  const auto literal = [](std::string& out, std::string_view text) {
    for (const char c : text) {
      if (c == '*' || c == '?' || c == '[' || c == '\\') out += '\\';
      out += c;
    }
  };
  std::string pattern;
  for (std::size_t i = 0; i < output_template.size(); ++i) {
    if (output_template[i] != '%' || i + 1 == output_template.size()) {
      literal(pattern, output_template.substr(i, 1));
      continue;
    }
    switch (const char c = output_template[++i]) {
      case 'p':
      case 't': pattern += '*'; break;
      case 'h': literal(pattern, contract::file_name_safe(values.host)); break;
      case 'r': literal(pattern, contract::file_name_safe(values.rank)); break;
      case '%': pattern += '%'; break;
      default:  // kept as written, as the library keeps it
        pattern += '%';
        literal(pattern, std::string(1, c));
    }
  }
  return pattern;
}

TraceFileStamps trace_file_stamps(const std::string& pattern) {
  TraceFileStamps stamps;
  glob_t found{};
  if (::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &found) == 0) {
    for (std::size_t i = 0; i < found.gl_pathc; ++i) {
      struct stat st {};
      // The library never writes through a symlink: lstat, regular files
      // only; a trace's pending file (pending/pending_log.h) is not a trace.
      if (::lstat(found.gl_pathv[i], &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (std::string_view(found.gl_pathv[i]).ends_with(contract::pending::kSuffix)) continue;
      stamps[found.gl_pathv[i]] = {st.st_dev, st.st_ino, st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_size};
    }
  }
  ::globfree(&found);
  return stamps;
}

std::vector<std::string> changed_trace_files(const TraceFileStamps& before, const TraceFileStamps& after) {
  std::vector<std::string> changed;
  for (const auto& [path, stamp] : after) {
    const auto old = before.find(path);
    if (old == before.end() || old->second != stamp) changed.push_back(path);
  }
  return changed;  // sorted: a std::map's keys
}

}  // namespace cumemtrace::cli
