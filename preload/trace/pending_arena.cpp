#include "trace/pending_arena.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "text/diagnostics.h"

namespace cumemtrace::preload::flush {

using contract::warn;
namespace pending = contract::pending;

namespace {

std::atomic<std::uint64_t> g_next_arena_id{1};

constexpr std::uint64_t kPage = 4096;

std::uint64_t round_to_page(std::uint64_t n) { return (n + kPage - 1) & ~(kPage - 1); }

// Creates the file for this trace alone: a `.pending` already there belongs
// to a trace of the same name that no longer exists (ours was just created
// exclusively), so it is stale and replaced.
int create_pending_file(const std::string& path) {
  constexpr int kFlags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(path.c_str(), kFlags, 0600);
  if (fd < 0 && errno == EEXIST && ::unlink(path.c_str()) == 0) fd = ::open(path.c_str(), kFlags, 0600);
  return fd;
}

}  // namespace

thread_local PendingArena::Seen PendingArena::t_api_seen[kSeenSlots] __attribute__((tls_model("initial-exec"))) = {};

bool PendingArena::open(const std::string& trace_path, std::uint32_t chunk_capacity, std::uint64_t max_chunks,
                        std::uint64_t start_ns, bool uses_tsc) {
  const std::uint64_t slot_bytes = round_to_page(sizeof(LogChunk) + chunk_capacity);
  std::uint64_t max_slots = std::max<std::uint64_t>(max_chunks, 2);
  // Never past RLIMIT_FSIZE: growing the file there would raise SIGXFSZ,
  // whose default action kills the program.
  rlimit limit{};
  if (::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const std::uint64_t room = limit.rlim_cur > pending::kHeaderBytes ? limit.rlim_cur - pending::kHeaderBytes : 0;
    max_slots = std::min(max_slots, room / slot_bytes);
    if (max_slots < 2) return false;
  }
  path_ = trace_path + pending::kSuffix;
  const int fd = create_pending_file(path_);
  if (fd < 0) {
    warn("cannot create %s: %s; events not yet written when the process is killed will be lost", path_.c_str(),
         std::strerror(errno));
    return false;
  }
  const std::uint64_t total = pending::kHeaderBytes + max_slots * slot_bytes;
  // The file is sparse: disk space is reserved (fallocate) only for the
  // slots handed out, before their pages are touched, so a full disk makes
  // allocate() fail rather than a store raise SIGBUS.
  void* map = MAP_FAILED;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0 && ::ftruncate(fd, static_cast<off_t>(total)) == 0 &&
      ::fallocate(fd, 0, 0, pending::kHeaderBytes) == 0) {
    map = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (map == MAP_FAILED) {
    warn("cannot set up %s: %s; events not yet written when the process is killed will be lost", path_.c_str(),
         std::strerror(errno));
    ::close(fd);
    ::unlink(path_.c_str());
    return false;
  }
  fd_ = fd;
  base_ = static_cast<char*>(map);
  mapped_bytes_ = total;
  slot_bytes_ = slot_bytes;
  chunk_capacity_ = chunk_capacity;
  max_slots_ = max_slots;
  auto* h = new (base_) pending::Header{};
  std::memcpy(h->magic, pending::kMagic, sizeof h->magic);
  h->version = pending::kVersion;
  h->header_bytes = static_cast<std::uint32_t>(pending::kHeaderBytes);
  h->slot_bytes = slot_bytes;
  h->max_slots = max_slots;
  h->start_ns = start_ns;
  h->pid = ::getpid();
  h->uses_tsc = uses_tsc ? 1 : 0;
  id_ = g_next_arena_id.fetch_add(1, std::memory_order_relaxed);
  header_ = h;
  return true;
}

PendingArena::~PendingArena() {
  if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

bool PendingArena::grow_to(std::uint64_t slots) {
  if (slots > max_slots_) return false;
  // Reserve ahead, so that a busy start does not pay a system call a chunk.
  // At least 1 MiB of slots (4 of the default 256 KiB chunks).
  const std::uint64_t step = std::max<std::uint64_t>(1, (std::uint64_t{1} << 20) / slot_bytes_);
  const std::uint64_t target = std::min(max_slots_, std::max({slots, allocated_slots_ * 2, step}));
  const auto offset = static_cast<off_t>(pending::kHeaderBytes + allocated_slots_ * slot_bytes_);
  const auto length = static_cast<off_t>((target - allocated_slots_) * slot_bytes_);
  if (::fallocate(fd_, 0, offset, length) != 0) {
    const int err = errno;
    // A smaller step may still fit.
    if (target > slots &&
        ::fallocate(fd_, 0, offset, static_cast<off_t>((slots - allocated_slots_) * slot_bytes_)) == 0) {
      allocated_slots_ = slots;
      return true;
    }
    if (!warned_) {
      warned_ = true;
      warn("cannot reserve space in %s: %s; events not yet written when the process is killed may be lost",
           path_.c_str(), std::strerror(err));
    }
    return false;
  }
  allocated_slots_ = target;
  return true;
}

LogChunk* PendingArena::allocate() {
  if (header_ == nullptr) return nullptr;
  while (lock_.exchange(true, std::memory_order_acquire)) sched_yield();
  LogChunk* chunk = free_;
  if (chunk != nullptr) {
    free_ = chunk->next.load(std::memory_order_relaxed);
    chunk->reset();
  } else {
    const std::uint64_t slot = header_->slots.load(std::memory_order_relaxed);
    if (slot < allocated_slots_ || grow_to(slot + 1)) {
      chunk = new (base_ + pending::kHeaderBytes + slot * slot_bytes_) LogChunk;
      chunk->capacity = chunk_capacity_;
      chunk->slot = static_cast<std::uint32_t>(slot);
      header_->slots.store(slot + 1, std::memory_order_release);
    }
  }
  lock_.store(false, std::memory_order_release);
  return chunk;
}

void PendingArena::release(LogChunk* chunk) {
  chunk->reset();
  while (lock_.exchange(true, std::memory_order_acquire)) sched_yield();
  chunk->next.store(free_, std::memory_order_relaxed);
  free_ = chunk;
  lock_.store(false, std::memory_order_release);
}

void PendingArena::publish_api(const char* api) {
  const auto key = reinterpret_cast<std::uintptr_t>(api);
  const std::uint32_t count = std::min(header_->api_count.load(std::memory_order_acquire), pending::kMaxApiNames);
  for (std::uint32_t i = 0; i < count; ++i) {
    if (header_->apis[i].ptr.load(std::memory_order_acquire) == key) return;
  }
  const std::uint32_t index = header_->api_count.fetch_add(1, std::memory_order_acq_rel);
  if (index >= pending::kMaxApiNames) return;  // a recovery writes "unknown" for it
  pending::ApiName& entry = header_->apis[index];
  std::size_t n = 0;
  while (n + 1 < sizeof entry.name && api[n] != '\0') {
    entry.name[n] = api[n];
    ++n;
  }
  entry.name[n] = '\0';
  entry.ptr.store(key, std::memory_order_release);
}

void PendingArena::mark_ended() {
  if (header_ == nullptr) return;
  header_->ended.store(1, std::memory_order_release);
  ::unlink(path_.c_str());
}

void PendingArena::exec_failed() {
  if (header_ == nullptr) return;
  header_->ended.store(0, std::memory_order_release);
}

void PendingArena::close_after_fork() {
  // The parent's lock is shared with this child through the descriptor: a
  // child that outlives a killed parent must not make it look alive.
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  header_ = nullptr;
  if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
  base_ = nullptr;
}

}  // namespace cumemtrace::preload::flush
