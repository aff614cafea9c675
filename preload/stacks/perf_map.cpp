#include "stacks/perf_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <vector>

namespace cumemtrace::preload {
namespace {

constexpr std::size_t kReadChunk = 64 * 1024;

bool parse_hex(std::string_view text, std::uintptr_t& out) {
  if (text.starts_with("0x")) text.remove_prefix(2);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, 16);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

std::string_view next_field(std::string_view& rest) {
  const std::size_t space = rest.find(' ');
  const std::string_view field = rest.substr(0, space);
  rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
  return field;
}

}  // namespace

std::optional<PerfMap::Entry> PerfMap::find(std::uintptr_t address) {
  std::uintptr_t start = 0;
  const Range* range = known(address, &start);
  if (!range) {
    read_appended_lines();
    range = known(address, &start);
  }
  if (!range) return std::nullopt;
  return Entry{start, range->end - start, range->name};
}

const PerfMap::Range* PerfMap::known(std::uintptr_t address, std::uintptr_t* start) const {
  auto it = ranges_.upper_bound(address);
  if (it == ranges_.begin()) return nullptr;
  --it;
  if (address >= it->second.end) return nullptr;
  *start = it->first;
  return &it->second;
}

void PerfMap::read_appended_lines() {
  // O_NOFOLLOW and the owner check: anyone can create files in /tmp, and a
  // map planted there by another user must not name our frames.
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(fd);
    return;
  }
  if (st.st_dev != device_ || st.st_ino != inode_ || st.st_size < consumed_) {
    ranges_.clear();  // a new file (a new process with a reused pid): start over
    consumed_ = 0;
    device_ = st.st_dev;
    inode_ = st.st_ino;
  }
  std::vector<char> buffer;
  std::size_t pending = 0;  // bytes of an incomplete line kept at the front
  while (consumed_ + static_cast<off_t>(pending) < st.st_size) {
    buffer.resize(pending + kReadChunk);
    const ssize_t n = ::pread(fd, buffer.data() + pending, kReadChunk,
                              consumed_ + static_cast<off_t>(pending));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    const std::string_view data(buffer.data(), pending + static_cast<std::size_t>(n));
    std::size_t line_start = 0;
    for (std::size_t nl; (nl = data.find('\n', line_start)) != std::string_view::npos;
         line_start = nl + 1) {
      parse_line(data.substr(line_start, nl - line_start));
    }
    consumed_ += static_cast<off_t>(line_start);
    // A line still being written stays for the next read.
    pending = data.size() - line_start;
    std::copy(buffer.begin() + static_cast<std::ptrdiff_t>(line_start),
              buffer.begin() + static_cast<std::ptrdiff_t>(data.size()), buffer.begin());
  }
  ::close(fd);
}

void PerfMap::parse_line(std::string_view line) {
  if (line.ends_with('\r')) line.remove_suffix(1);
  std::string_view rest = line;
  std::uintptr_t start = 0, size = 0;
  if (!parse_hex(next_field(rest), start) || !parse_hex(next_field(rest), size)) return;
  if (size == 0 || rest.empty() || start + size < start) return;
  ranges_.insert_or_assign(start, Range{start + size, std::string(rest)});
}

}  // namespace cumemtrace::preload
