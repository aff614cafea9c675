// Device memory shared between two processes with legacy CUDA IPC, checked
// byte for byte on both sides. Written as a plain CUDA program (runs on the
// simulated device or a real GPU, bare or under a profiler), so that a tool
// standing between the program and the driver — a caching pool — can be
// seen to keep shared memory intact.
//
//   ipc_share [--api runtime|driver] [--allow-refusal]
//
// The parent allocates six buffers, in this order: 1 KiB, 64 KiB, 3 MiB,
// 8 MiB, 64 MiB and 1 KiB (cudaMalloc, or cuMemAlloc_v2 with --api driver;
// under a caching pool several of them share one driver allocation), fills
// each with its own pattern from the host, and asks an IPC handle for each
// (cudaIpcGetMemHandle / cuIpcGetMemHandle). It then starts a child — fork
// and exec of this program, so the child starts clean, as
// torch.multiprocessing's spawn does, and inherits LD_PRELOAD — with the
// handles in hex on its command line. The child opens each handle
// (cudaIpcOpenMemHandle / cuIpcOpenMemHandle), copies the buffer back and
// compares it with the pattern, writes its own stamp into the buffer's first
// 256 bytes, closes the handle and reports each buffer through a pipe. The
// parent then compares every buffer in full with what it must hold: its
// pattern, with the child's stamp at the start of each buffer the child
// opened; a stamp or pattern found in the wrong buffer is named.
//
// stdout, one line per buffer and a summary:
//   buffer <i> size=<n>: shared ok
//   buffer <i> size=<n>: refused code=<c>[ last_error=<what cudaGetLastError said>]
//   buffer <i> size=<n>: CORRUPT <what differs>
//   ipc_share: ok=<n> refused=<n> corrupt=<n>
// A refusal is the get-handle call failing (code: its cudaError_t or
// CUresult). With the runtime API the line also says whether the refusal was
// reported by cudaGetLastError exactly once, as the real runtime does
// ("last_error=once"); anything else ("last_error=<first>,<second>") is
// counted as corrupt: a stale error breaks the next caller that checks it.
// A buffer whose handle the child could not open, or whose bytes it did not
// find, is CORRUPT too.
//
// Exit status: 0 when corrupt == 0 and (refused == 0 or --allow-refusal),
// 1 otherwise, 2 for a setup error (no device, an allocation or copy that
// failed, no child). Diagnostics go to stderr.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kSizes[] = {1u << 10, 64u << 10, 3u << 20, 8u << 20, 64u << 20, 1u << 10};
constexpr int kBuffers = sizeof kSizes / sizeof kSizes[0];
constexpr std::size_t largest() {
  std::size_t m = 0;
  for (std::size_t n : kSizes) m = n > m ? n : m;
  return m;
}
constexpr std::size_t kStamp = 256;  // bytes the child writes at the start of each buffer
constexpr const char* kChildFlag = "--ipc-share-child";

bool g_driver = false;

// ---- patterns: every 8-byte word says whose it is and where it belongs -----
// byte 0: 0xA0 + buffer (the parent's pattern) or 0xC0 + buffer (the child's
// stamp); bytes 1..7: the word's index in the buffer.
std::uint64_t word(unsigned tag, std::size_t index) { return static_cast<std::uint64_t>(index) << 8 | tag; }

void fill(std::vector<unsigned char>& v, unsigned tag, std::size_t from, std::size_t to) {
  for (std::size_t q = from / 8; q < to / 8; ++q) {
    const std::uint64_t w = word(tag, q);
    std::memcpy(v.data() + q * 8, &w, 8);
  }
}
unsigned parent_tag(int i) { return 0xA0u + static_cast<unsigned>(i); }
unsigned child_tag(int i) { return 0xC0u + static_cast<unsigned>(i); }

std::string origin_of(const unsigned char* p) {
  std::uint64_t w = 0;
  std::memcpy(&w, p, 8);
  const unsigned tag = w & 0xff;
  const std::uint64_t at = (w >> 8) * 8;
  char text[128];
  if (w == 0) {
    std::snprintf(text, sizeof text, "zeros");
  } else if (tag >= 0xA0 && tag < 0xA0 + kBuffers) {
    std::snprintf(text, sizeof text, "buffer %u's pattern for offset %llu", tag - 0xA0,
                  static_cast<unsigned long long>(at));
  } else if (tag >= 0xC0 && tag < 0xC0 + kBuffers) {
    std::snprintf(text, sizeof text, "the child's stamp for buffer %u offset %llu", tag - 0xC0,
                  static_cast<unsigned long long>(at));
  } else {
    std::snprintf(text, sizeof text, "unknown bytes 0x%016llx", static_cast<unsigned long long>(w));
  }
  return text;
}

// Empty when the first n bytes are equal; otherwise where and how they differ.
std::string difference(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
                       std::size_t n) {
  if (std::memcmp(got.data(), want.data(), n) == 0) return {};
  std::size_t first = n, count = 0;
  for (std::size_t k = 0; k < n; ++k) {
    if (got[k] != want[k]) {
      if (first == n) first = k;
      ++count;
    }
  }
  if (count == 0) return {};
  const std::size_t w = first / 8 * 8;
  char text[512];
  std::snprintf(text, sizeof text, "%zu bytes differ, first at offset %zu: found %s where %s belongs", count,
                first, origin_of(got.data() + w).c_str(), origin_of(want.data() + w).c_str());
  return text;
}

// ---- the two APIs -------------------------------------------------------------
int code_of(cudaError_t e) { return static_cast<int>(e); }
int code_of(CUresult r) { return static_cast<int>(r); }

bool setup() {
  if (!g_driver) {
    const cudaError_t e = cudaFree(nullptr);
    if (e != cudaSuccess) std::fprintf(stderr, "ipc_share: cudaFree(NULL): %s\n", cudaGetErrorName(e));
    return e == cudaSuccess;
  }
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUresult r = cuInit(0);
  if (r == CUDA_SUCCESS) r = cuDeviceGet(&dev, 0);
  if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&ctx, dev);
  if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(ctx);
  if (r != CUDA_SUCCESS) std::fprintf(stderr, "ipc_share: driver setup failed: %d\n", code_of(r));
  return r == CUDA_SUCCESS;
}

// Each returns 0 on success, else the API's error code.
int device_alloc(std::uintptr_t* p, std::size_t n) {
  if (!g_driver) {
    void* d = nullptr;
    const cudaError_t e = cudaMalloc(&d, n);
    *p = reinterpret_cast<std::uintptr_t>(d);
    return code_of(e);
  }
  CUdeviceptr d = 0;
  const CUresult r = cuMemAlloc(&d, n);
  *p = static_cast<std::uintptr_t>(d);
  return code_of(r);
}
int device_free(std::uintptr_t p) {
  if (!g_driver) return code_of(cudaFree(reinterpret_cast<void*>(p)));
  return code_of(cuMemFree(static_cast<CUdeviceptr>(p)));
}
int to_device(std::uintptr_t p, const void* h, std::size_t n) {
  if (!g_driver) return code_of(cudaMemcpy(reinterpret_cast<void*>(p), h, n, cudaMemcpyHostToDevice));
  return code_of(cuMemcpyHtoD(static_cast<CUdeviceptr>(p), h, n));
}
int to_host(void* h, std::uintptr_t p, std::size_t n) {
  if (!g_driver) return code_of(cudaMemcpy(h, reinterpret_cast<void*>(p), n, cudaMemcpyDeviceToHost));
  return code_of(cuMemcpyDtoH(h, static_cast<CUdeviceptr>(p), n));
}
int get_handle(unsigned char out[64], std::uintptr_t p) {
  if (!g_driver) {
    cudaIpcMemHandle_t h{};
    const cudaError_t e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(p));
    std::memcpy(out, &h, 64);
    return code_of(e);
  }
  CUipcMemHandle h{};
  const CUresult r = cuIpcGetMemHandle(&h, static_cast<CUdeviceptr>(p));
  std::memcpy(out, &h, 64);
  return code_of(r);
}
int open_handle(std::uintptr_t* p, const unsigned char in[64]) {
  if (!g_driver) {
    cudaIpcMemHandle_t h{};
    std::memcpy(&h, in, 64);
    void* d = nullptr;
    const cudaError_t e = cudaIpcOpenMemHandle(&d, h, cudaIpcMemLazyEnablePeerAccess);
    *p = reinterpret_cast<std::uintptr_t>(d);
    return code_of(e);
  }
  CUipcMemHandle h{};
  std::memcpy(&h, in, 64);
  CUdeviceptr d = 0;
  const CUresult r = cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  *p = static_cast<std::uintptr_t>(d);
  return code_of(r);
}
int close_handle(std::uintptr_t p) {
  if (!g_driver) return code_of(cudaIpcCloseMemHandle(reinterpret_cast<void*>(p)));
  return code_of(cuIpcCloseMemHandle(static_cast<CUdeviceptr>(p)));
}

std::string hex(const unsigned char* b, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    s += digits[b[i] >> 4];
    s += digits[b[i] & 15];
  }
  return s;
}
bool unhex(const char* s, unsigned char* b, std::size_t n) {
  if (std::strlen(s) != 2 * n) return false;
  for (std::size_t i = 0; i < n; ++i) {
    unsigned v = 0;
    if (std::sscanf(s + 2 * i, "%2x", &v) != 1) return false;
    b[i] = static_cast<unsigned char>(v);
  }
  return true;
}

// ---- the child: ipc_share --ipc-share-child API FD (INDEX:HEX)... ----------
// Reports one line per handle on FD: "<i> ok", or "<i> <what went wrong>".
int child_main(int argc, char** argv) {
  if (argc < 4) return 2;
  g_driver = std::strcmp(argv[2], "driver") == 0;
  const int fd = std::atoi(argv[3]);
  FILE* report = fdopen(fd, "w");
  if (!report || !setup()) return 2;
  // Reused for every buffer: a fresh 64 MiB vector per buffer costs page faults.
  std::vector<unsigned char> got(largest()), want(largest());
  for (int a = 4; a < argc; ++a) {
    int i = -1;
    unsigned char h[64];
    const char* colon = std::strchr(argv[a], ':');
    if (!colon || std::sscanf(argv[a], "%d", &i) != 1 || i < 0 || i >= kBuffers || !unhex(colon + 1, h, 64)) {
      return 2;
    }
    const std::size_t n = kSizes[i];
    std::uintptr_t p = 0;
    if (int c = open_handle(&p, h)) {
      std::fprintf(report, "%d the child could not open the handle (code=%d)\n", i, c);
      continue;
    }
    fill(want, parent_tag(i), 0, n);
    std::string what;
    if (int c = to_host(got.data(), p, n)) {
      what = "the child could not copy the buffer to the host (code=" + std::to_string(c) + ")";
    } else if (std::string d = difference(got, want, n); !d.empty()) {
      what = "the child read wrong bytes: " + d;
    }
    // The stamp is written whatever was read: a child writing through a
    // mapping of the wrong memory is what the parent must be able to see.
    std::vector<unsigned char> stamp(kStamp);
    fill(stamp, child_tag(i), 0, kStamp);
    if (int c = to_device(p, stamp.data(), kStamp); c && what.empty()) {
      what = "the child could not write into the buffer (code=" + std::to_string(c) + ")";
    }
    if (int c = close_handle(p); c && what.empty()) {
      what = "the child could not close the handle (code=" + std::to_string(c) + ")";
    }
    std::fprintf(report, "%d %s\n", i, what.empty() ? "ok" : what.c_str());
  }
  std::fclose(report);
  return 0;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  buf[n] = 0;
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], kChildFlag) == 0) return child_main(argc, argv);
  bool allow_refusal = false;
  for (int a = 1; a < argc; ++a) {
    if (std::strcmp(argv[a], "--api") == 0 && a + 1 < argc &&
        (std::strcmp(argv[a + 1], "runtime") == 0 || std::strcmp(argv[a + 1], "driver") == 0)) {
      g_driver = std::strcmp(argv[++a], "driver") == 0;
    } else if (std::strcmp(argv[a], "--allow-refusal") == 0) {
      allow_refusal = true;
    } else {
      std::fprintf(stderr, "usage: %s [--api runtime|driver] [--allow-refusal]\n", argv[0]);
      return 2;
    }
  }
  if (!setup()) return 2;

  std::uintptr_t ptr[kBuffers] = {};
  std::vector<unsigned char> expect[kBuffers];
  for (int i = 0; i < kBuffers; ++i) {
    expect[i].resize(kSizes[i]);
    fill(expect[i], parent_tag(i), 0, kSizes[i]);
    if (int c = device_alloc(&ptr[i], kSizes[i])) {
      std::fprintf(stderr, "ipc_share: allocating buffer %d (%zu bytes) failed: code %d\n", i, kSizes[i], c);
      return 2;
    }
    if (int c = to_device(ptr[i], expect[i].data(), kSizes[i])) {
      std::fprintf(stderr, "ipc_share: filling buffer %d failed: code %d\n", i, c);
      return 2;
    }
  }

  // Handles. With the runtime, a refusal must be the thread's last error
  // exactly once.
  if (!g_driver) cudaGetLastError();
  unsigned char handle[kBuffers][64];
  int refused_code[kBuffers] = {};
  std::string refusal_note[kBuffers];
  bool stale[kBuffers] = {};
  for (int i = 0; i < kBuffers; ++i) {
    refused_code[i] = get_handle(handle[i], ptr[i]);
    if (refused_code[i] && !g_driver) {
      const cudaError_t first = cudaGetLastError();
      const cudaError_t second = cudaGetLastError();
      if (code_of(first) == refused_code[i] && second == cudaSuccess) {
        refusal_note[i] = " last_error=once";
      } else {
        stale[i] = true;
        refusal_note[i] = " last_error=" + std::to_string(code_of(first)) + "," + std::to_string(code_of(second)) +
                          " (expected " + std::to_string(refused_code[i]) + " once)";
      }
    }
  }

  // The child, with the handles of the buffers that have one.
  const std::string self = self_path();
  int fds[2];
  if (self.empty() || pipe(fds) != 0) {
    std::fprintf(stderr, "ipc_share: cannot start the child\n");
    return 2;
  }
  std::vector<std::string> args = {self, kChildFlag, g_driver ? "driver" : "runtime", std::to_string(fds[1])};
  for (int i = 0; i < kBuffers; ++i) {
    if (!refused_code[i]) args.push_back(std::to_string(i) + ":" + hex(handle[i], 64));
  }
  std::vector<char*> cargs;
  for (auto& s : args) cargs.push_back(s.data());
  cargs.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) {
    std::fprintf(stderr, "ipc_share: fork failed\n");
    return 2;
  }
  if (child == 0) {
    close(fds[0]);
    execv(cargs[0], cargs.data());
    _exit(127);
  }
  close(fds[1]);
  std::string child_says[kBuffers];
  if (FILE* in = fdopen(fds[0], "r")) {
    char line[1024];
    while (std::fgets(line, sizeof line, in)) {
      int i = -1, used = 0;
      if (std::sscanf(line, "%d %n", &i, &used) == 1 && i >= 0 && i < kBuffers) {
        std::string text = line + used;
        while (!text.empty() && text.back() == '\n') text.pop_back();
        child_says[i] = text;
      }
    }
    std::fclose(in);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "ipc_share: the child ended with status %#x\n", static_cast<unsigned>(status));
    if (WIFEXITED(status) && (WEXITSTATUS(status) == 2 || WEXITSTATUS(status) == 127)) return 2;
  }

  int ok = 0, refused = 0, corrupt = 0;
  for (int i = 0; i < kBuffers; ++i) {
    const bool shared = !refused_code[i];
    // The child wrote its stamp into every buffer it opened (whatever it read).
    const bool opened = shared && !child_says[i].empty() && child_says[i].find("could not open") == std::string::npos;
    if (opened) fill(expect[i], child_tag(i), 0, kStamp);
  }
  std::vector<unsigned char> got(largest());
  for (int i = 0; i < kBuffers; ++i) {
    std::string what;
    if (int c = to_host(got.data(), ptr[i], kSizes[i])) {
      what = "the parent could not read the buffer back (code=" + std::to_string(c) + ")";
    } else if (std::string d = difference(got, expect[i], kSizes[i]); !d.empty()) {
      what = "the parent's buffer: " + d;
    }
    if (!refused_code[i]) {
      const std::string& c = child_says[i];
      const std::string child_what = c.empty() ? "the child reported nothing" : c == "ok" ? "" : c;
      if (!child_what.empty()) what = what.empty() ? child_what : child_what + "; " + what;
    }
    std::printf("buffer %d size=%zu: ", i, kSizes[i]);
    if (!what.empty()) {
      ++corrupt;
      std::printf("CORRUPT %s\n", what.c_str());
    } else if (refused_code[i]) {
      ++refused;
      if (stale[i]) ++corrupt;
      std::printf("refused code=%d%s\n", refused_code[i], refusal_note[i].c_str());
    } else {
      ++ok;
      std::printf("shared ok\n");
    }
  }
  for (int i = 0; i < kBuffers; ++i) {
    if (int c = device_free(ptr[i])) std::fprintf(stderr, "ipc_share: freeing buffer %d failed: code %d\n", i, c);
  }
  std::printf("ipc_share: ok=%d refused=%d corrupt=%d\n", ok, refused, corrupt);
  return corrupt == 0 && (refused == 0 || allow_refusal) ? 0 : 1;
}
