// The soak test's program (issue 6, "under load"): 16 threads allocate and
// free random sizes (1 B .. 8 MiB, seeded per thread) for SECONDS, through
// cudaMalloc/cudaFree and cudaMallocAsync/cudaFreeAsync on several streams,
// keeping a random live set, with stream and device synchronisations; in the
// middle, worker threads fork while the others go on allocating; now and
// then a thread uses a stream of its own for a few allocations and destroys
// it. The
// program keeps its own exact counts and prints them at the end, for the
// test to hold the trace against:
//
//   alloc cudaMalloc N BYTES      (one line per allocating API)
//   free cudaFree N BYTES         (one line per freeing API)
//   live N BYTES                  (left allocated at exit, on purpose)
//   children N                    (forks made)
//
// Children. A child of a process that has initialised CUDA cannot use CUDA
// (CUDA C Programming Guide, "CUDA ... is not fork-safe": the child gets
// cudaErrorInitializationError, which the simulated device models), so each
// forked child first tries what an unaware program would (a cudaMalloc and
// a cudaMallocAsync) and writes what it got to DIR/fork.PID ("cudaMalloc
// CODE ptr P", "cudaMallocAsync CODE ptr P", "last CODE"); then, by turns,
// it _exits, exits normally (running the inherited atexit handlers and
// destructors), or execs this program as `soak child SEED DIR`, a fresh
// process that allocates for real and writes its own counts (the lines
// above) to DIR/exec.PID before it returns from main.
//
// A watchdog thread aborts with "soak: thread T made no progress for S s"
// if any thread stops advancing for STALL seconds: a deadlock or a stall
// becomes a clear failure, not a hung test.
//
//   soak SECONDS DIR [STALL]     (STALL default 30)
//   soak child SEED DIR
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "forks_under_lsan.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kThreads = 16;
constexpr int kForks = 6;
constexpr std::size_t kMaxLivePerThread = 48;

enum Api : int { kMalloc, kMallocAsync, kFree, kFreeAsync, kApis };
constexpr const char* kApiNames[kApis] = {"cudaMalloc", "cudaMallocAsync", "cudaFree", "cudaFreeAsync"};

struct Counts {
  std::array<long, kApis> calls{};
  std::array<unsigned long long, kApis> bytes{};
  void add(Api api, std::size_t size) {
    ++calls[api];
    bytes[api] += size;
  }
  void merge(const Counts& other) {
    for (int a = 0; a < kApis; ++a) {
      calls[a] += other.calls[a];
      bytes[a] += other.bytes[a];
    }
  }
};

struct Block {
  void* ptr;
  std::size_t size;
  bool async;
  int stream;  // index into the streams, for async blocks
};

// Shared by the workers; set up by main before they start.
std::vector<cudaStream_t> g_streams;
std::array<std::atomic<unsigned long>, kThreads + 1> g_progress{};  // [kThreads]: main
std::atomic<bool> g_stop{false};
std::atomic<int> g_next_fork{0};
std::atomic<int> g_failures{0};
std::array<Clock::time_point, kForks> g_fork_at{};
std::array<pid_t, kForks> g_children{};
std::array<std::atomic<pid_t>, kThreads> g_waiting_for{};  // the child a thread waits for, for the watchdog

void fail(const char* what, cudaError_t rc) {
  std::fprintf(stderr, "soak: %s: %s\n", what, cudaGetErrorName(rc));
  g_failures.fetch_add(1);
}

bool ok(cudaError_t rc, const char* what) {
  if (rc == cudaSuccess) return true;
  fail(what, rc);
  return false;
}

// Bytes to MiBs: a uniform exponent, then a uniform size within its octave.
std::size_t random_size(std::mt19937_64& rng) {
  const int octave = std::uniform_int_distribution<int>(0, 22)(rng);
  const std::size_t low = std::size_t{1} << octave;
  return std::uniform_int_distribution<std::size_t>(low, 2 * low - 1)(rng);
}

class Worker {
 public:
  Worker(int index, std::uint64_t seed) : index_(index), rng_(seed) {}

  bool allocate() {
    const std::size_t size = random_size(rng_);
    void* p = nullptr;
    if (std::bernoulli_distribution(0.5)(rng_)) {
      if (!ok(cudaMalloc(&p, size), "cudaMalloc")) return false;
      counts_.add(kMalloc, size);
      live_.push_back({p, size, false, 0});
    } else {
      const int s = pick_stream();
      if (!ok(cudaMallocAsync(&p, size, g_streams[s]), "cudaMallocAsync")) return false;
      counts_.add(kMallocAsync, size);
      live_.push_back({p, size, true, s});
      // Work queued on the block, so its free has something to wait for.
      if (std::bernoulli_distribution(0.25)(rng_)) {
        if (!ok(cudaMemsetAsync(p, index_, std::min<std::size_t>(size, 64 << 10), g_streams[s]), "cudaMemsetAsync")) {
          return false;
        }
      }
    }
    return true;
  }

  // Frees a random live block. A stream-ordered block is freed on its own
  // stream, or on another one once that stream is ordered after the
  // allocation (a stream synchronisation or an event wait): the CUDA
  // Programming Guide's rule for freeing on another stream.
  bool free_one() {
    const std::size_t at = std::uniform_int_distribution<std::size_t>(0, live_.size() - 1)(rng_);
    const Block b = live_[at];
    if (!release(b)) return false;  // still live, as far as the counts go
    live_[at] = live_.back();
    live_.pop_back();
    return true;
  }

  bool release(const Block& b) {
    if (!b.async) {
      if (!ok(cudaFree(b.ptr), "cudaFree")) return false;
      counts_.add(kFree, b.size);
      return true;
    }
    int s = b.stream;
    if (std::bernoulli_distribution(0.3)(rng_)) {
      s = pick_stream();
      if (s != b.stream) {
        if (std::bernoulli_distribution(0.5)(rng_)) {
          if (!ok(cudaStreamSynchronize(g_streams[b.stream]), "cudaStreamSynchronize")) return false;
        } else {
          if (!event_ && !ok(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate")) {
            return false;
          }
          if (!ok(cudaEventRecord(event_, g_streams[b.stream]), "cudaEventRecord") ||
              !ok(cudaStreamWaitEvent(g_streams[s], event_, 0), "cudaStreamWaitEvent")) {
            return false;
          }
        }
      }
    }
    if (!ok(cudaFreeAsync(b.ptr, g_streams[s]), "cudaFreeAsync")) return false;
    counts_.add(kFreeAsync, b.size);
    return true;
  }

  // A stream that lives for a few allocations: its blocks are freed in its
  // order and it is destroyed at once, while its work may still run
  // (cudaStreamDestroy returns immediately; pending work completes), so a
  // later stream may get its handle.
  bool short_lived_stream() {
    cudaStream_t s = nullptr;
    if (!ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags")) return false;
    void* blocks[4] = {};
    std::size_t sizes[4] = {};
    const int wanted = std::uniform_int_distribution<int>(1, 4)(rng_);
    bool good = true;
    int made = 0;
    for (; good && made < wanted; ++made) {
      sizes[made] = random_size(rng_);
      if (!ok(cudaMallocAsync(&blocks[made], sizes[made], s), "cudaMallocAsync")) break;
      counts_.add(kMallocAsync, sizes[made]);
      good = ok(cudaMemsetAsync(blocks[made], index_, std::min<std::size_t>(sizes[made], 64 << 10), s),
                "cudaMemsetAsync");
    }
    good = good && made == wanted;
    // What was allocated is freed even after a failure, so the counts stay exact.
    for (int i = 0; i < made; ++i) {
      if (ok(cudaFreeAsync(blocks[i], s), "cudaFreeAsync")) {
        counts_.add(kFreeAsync, sizes[i]);
      } else {
        live_.push_back({blocks[i], sizes[i], true, 0});  // left allocated (stream 0 is the legacy one)
        good = false;
      }
    }
    return ok(cudaStreamDestroy(s), "cudaStreamDestroy") && good;
  }

  bool synchronize() {
    if (std::bernoulli_distribution(0.1)(rng_)) return ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    return ok(cudaStreamSynchronize(g_streams[pick_stream()]), "cudaStreamSynchronize");
  }

  void run() {
    bool good = true;
    int burst = 0;
    while (good && !g_stop.load(std::memory_order_relaxed)) {
      const double roll = std::uniform_real_distribution<double>(0, 1)(rng_);
      if (roll < 0.02) {
        good = synchronize();
      } else if (roll < 0.025) {
        good = short_lived_stream();
      } else if (live_.empty() || (live_.size() < kMaxLivePerThread && roll < 0.51)) {
        good = allocate();
      } else {
        good = free_one();
      }
      g_progress[index_].fetch_add(1, std::memory_order_relaxed);
      maybe_fork();
      // Mostly paced (so a minute's trace stays tens of MB), sometimes in
      // bursts without pause (so the hooks really meet).
      if (burst > 0) {
        --burst;
      } else if (std::bernoulli_distribution(0.02)(rng_)) {
        burst = 40;
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 9000)(rng_)));
      }
    }
    // Leave a random half of the live set allocated at exit.
    while (good && live_.size() > kept_at_exit_) {
      good = free_one();
      g_progress[index_].fetch_add(1, std::memory_order_relaxed);
    }
    if (!good) g_stop.store(true);
  }

  void keep_at_exit(std::size_t n) { kept_at_exit_ = n; }
  std::size_t seed_for_child() { return rng_(); }
  const Counts& counts() const { return counts_; }
  const std::vector<Block>& live() const { return live_; }

 private:
  int pick_stream() { return std::uniform_int_distribution<int>(0, static_cast<int>(g_streams.size()) - 1)(rng_); }
  void maybe_fork();

  int index_;
  std::mt19937_64 rng_;
  Counts counts_;
  std::vector<Block> live_;
  std::size_t kept_at_exit_ = 0;
  cudaEvent_t event_ = nullptr;
};

// A file for the test to read, written with plain write(2): a forked child
// of a multithreaded process must not take stdio's locks.
void write_text(const std::string& path, const std::string& text) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  close(fd);
}

std::string counts_text(const Counts& c, long live, unsigned long long live_bytes) {
  std::string out;
  for (int a = 0; a < kApis; ++a) {
    out += std::string(a < kFree ? "alloc " : "free ") + kApiNames[a] + " " + std::to_string(c.calls[a]) + " " +
           std::to_string(c.bytes[a]) + "\n";
  }
  return out + "live " + std::to_string(live) + " " + std::to_string(live_bytes) + "\n";
}

std::string g_dir;       // where children write their counts
std::string g_self;      // this program, for the children that exec it

// In the forked child (only this thread exists): what CUDA says to a child
// of an initialised process, then one of three ways out.
[[noreturn]] void forked_child(int fork_index, std::size_t seed) {
  std::string report;
  void* p = nullptr;
  cudaError_t rc = cudaMalloc(&p, 1 << 20);
  report += std::string("cudaMalloc ") + cudaGetErrorName(rc) + " ptr " + (p ? "set" : "null") + "\n";
  if (rc == cudaSuccess) cudaFree(p);
  p = nullptr;
  rc = cudaMallocAsync(&p, 4096, nullptr);
  report += std::string("cudaMallocAsync ") + cudaGetErrorName(rc) + " ptr " + (p ? "set" : "null") + "\n";
  if (rc == cudaSuccess) cudaFreeAsync(p, nullptr);
  report += std::string("last ") + cudaGetErrorName(cudaGetLastError()) + "\n";
  const std::string pid = std::to_string(getpid());
  switch (fork_index % 3) {
    case 0:
      write_text(g_dir + "/fork." + pid, report + "exit _exit\n");
      _exit(0);
    case 1:
      write_text(g_dir + "/fork." + pid, report + "exit exit\n");
      std::exit(0);
    default: {
      write_text(g_dir + "/fork." + pid, report + "exit exec\n");
      const std::string seed_text = std::to_string(seed);
      execl(g_self.c_str(), g_self.c_str(), "child", seed_text.c_str(), g_dir.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
}

void Worker::maybe_fork() {
  int next = g_next_fork.load(std::memory_order_relaxed);
  // Fork i is made by thread (5 i + 3) mod 16 once its time has come:
  // different threads, while the others allocate.
  if (next >= kForks || (5 * next + 3) % kThreads != index_ || Clock::now() < g_fork_at[next]) return;
  if (!g_next_fork.compare_exchange_strong(next, next + 1)) return;
  const std::size_t seed = seed_for_child();
  const pid_t child = fork();
  if (child == 0) forked_child(next, seed);
  if (child < 0) {
    std::fprintf(stderr, "soak: fork failed\n");
    g_failures.fetch_add(1);
    return;
  }
  g_children[next] = child;
  g_waiting_for[index_].store(child);
  int status = 0;
  const pid_t waited = waitpid(child, &status, 0);
  g_waiting_for[index_].store(0);
  if (waited != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "soak: child %d (fork %d) ended with status %#x\n", child, next, status);
    g_failures.fetch_add(1);
  }
}

// Aborts the process when a thread stops advancing: a deadlock in the hooks
// (or the program) is reported, not waited for.
void watchdog(int stall_seconds, const std::atomic<bool>* done) {
  std::array<unsigned long, kThreads + 1> seen{};
  std::array<Clock::time_point, kThreads + 1> since;
  since.fill(Clock::now());
  while (!done->load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto now = Clock::now();
    for (int t = 0; t <= kThreads; ++t) {
      const unsigned long p = g_progress[t].load(std::memory_order_relaxed);
      if (p != seen[t] || p == ~0ul) {  // ~0: finished
        seen[t] = p;
        since[t] = now;
      } else if (now - since[t] > std::chrono::seconds(stall_seconds)) {
        const pid_t child = t < kThreads ? g_waiting_for[t].load() : 0;
        std::fprintf(stderr, "soak: %s %d made no progress for %d s (stall or deadlock%s%s); aborting\n",
                     t < kThreads ? "thread" : "main thread", t, stall_seconds, child ? ", waiting for child " : "",
                     child ? std::to_string(child).c_str() : "");
        std::abort();
      }
    }
  }
}

// `soak child SEED DIR`: a fresh process (exec'd by a forked child) that
// allocates for real, frees most of it, and writes its counts.
int exec_child(std::uint64_t seed) {
  g_streams = {nullptr};
  cudaStream_t s = nullptr;
  if (!ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate")) return 1;
  g_streams.push_back(s);
  Worker w(0, seed);
  for (int i = 0; i < 300 && g_failures.load() == 0; ++i) {
    if (w.live().empty() || (w.live().size() < 16 && i % 3 != 2)) {
      w.allocate();
    } else {
      w.free_one();
    }
  }
  if (!ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) return 1;
  unsigned long long live_bytes = 0;
  for (const Block& b : w.live()) live_bytes += b.size;
  write_text(g_dir + "/exec." + std::to_string(getpid()),
             counts_text(w.counts(), static_cast<long>(w.live().size()), live_bytes));
  return g_failures.load() == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "child") == 0) {
    g_dir = argv[3];
    return exec_child(std::strtoull(argv[2], nullptr, 10));
  }
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: soak SECONDS DIR [STALL_SECONDS] | soak child SEED DIR\n");
    return 2;
  }
  const double seconds = std::atof(argv[1]);
  g_dir = argv[2];
  const int stall = argc == 4 ? std::atoi(argv[3]) : 30;
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return 2;
  g_self = self;

  // The legacy default stream, the per-thread one, a blocking and two
  // non-blocking streams.
  g_streams = {nullptr, cudaStreamPerThread};
  for (const unsigned flags : {cudaStreamDefault, cudaStreamNonBlocking, cudaStreamNonBlocking}) {
    cudaStream_t s = nullptr;
    if (!ok(cudaStreamCreateWithFlags(&s, flags), "cudaStreamCreateWithFlags")) return 1;
    g_streams.push_back(s);
  }
  const auto start = Clock::now();
  const auto run_for = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  for (int i = 0; i < kForks; ++i) g_fork_at[i] = start + run_for / 4 + run_for * i / (2 * kForks);

  std::atomic<bool> done{false};
  std::thread dog(watchdog, stall, &done);
  std::vector<Worker> workers;
  workers.reserve(kThreads);
  std::mt19937_64 seeds(20261122);
  for (int i = 0; i < kThreads; ++i) {
    workers.emplace_back(i, seeds());
    workers.back().keep_at_exit(static_cast<std::size_t>(i % 4) * 3);
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&workers, i] {
      workers[i].run();
      g_progress[i].store(~0ul);
    });
  }
  while (!g_stop.load() && Clock::now() - start < run_for) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    g_progress[kThreads].fetch_add(1);
  }
  g_stop.store(true);
  for (auto& t : threads) t.join();
  const bool synced = ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  g_progress[kThreads].store(~0ul);
  done.store(true);
  dog.join();

  Counts total;
  long live = 0;
  unsigned long long live_bytes = 0;
  for (const Worker& w : workers) {
    total.merge(w.counts());
    live += static_cast<long>(w.live().size());
    for (const Block& b : w.live()) live_bytes += b.size;
  }
  std::fputs(counts_text(total, live, live_bytes).c_str(), stdout);
  const int forks = g_next_fork.load();
  std::printf("children %d\n", forks);
  for (int i = 0; i < forks; ++i) std::printf("child %d\n", static_cast<int>(g_children[i]));
  return synced && g_failures.load() == 0 && forks == kForks ? 0 : 1;
}
