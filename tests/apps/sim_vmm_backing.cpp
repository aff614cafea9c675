// How the sim backs virtual memory management (tests/sim/driver/drv_vmm.cpp):
// like a real driver, cuMemCreate/cuMemMap write no file, so a program under
// a small RLIMIT_FSIZE (a full disk, as tests/apps/survive_signals.cpp fill
// simulates it) with SIGXFSZ at its default neither dies nor sees an error,
// and the descriptor limit does not bound the number of handles. Under that
// limit it checks what the sim models of VMM memory: one handle mapped at two
// addresses shows the same bytes through both, a handle released while
// mapped keeps its memory until the last unmap, data survives unmap/remap, a
// mapping may cover the first part of a handle, capacity is counted from
// cuMemCreate until released and unmapped, and a forked child does not have
// the mappings (touching them faults); a destroyed handle's memory goes back
// to the kernel (a new handle holds no page until written, and reads zeros).
//
// sim_vmm_backing --bench N: N times the pool's per-page sequence
// (cuMemCreate, cuMemMap, cuMemRelease, cuMemSetAccess, cuMemUnmap) on 2 MiB,
// then the same with one byte written per page; prints ns per page.
#include <cuda.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "sim_test.h"

namespace {

constexpr std::size_t kPage = std::size_t{2} << 20;

std::size_t used() {
  std::size_t f = 0, t = 0;
  SIM_CU_OK(cuMemGetInfo(&f, &t));
  return t - f;
}

CUmemAllocationProp device_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

void allow(CUdeviceptr p, std::size_t n) {
  CUmemAccessDesc acc{};
  acc.location = device_prop().location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  SIM_CU_OK(cuMemSetAccess(p, n, &acc, 1));
}

unsigned char* host(CUdeviceptr p) { return reinterpret_cast<unsigned char*>(p); }

bool all(CUdeviceptr p, std::size_t n, unsigned char v) {
  std::vector<unsigned char> b(n);
  SIM_CU_OK(cuMemcpyDtoH(b.data(), p, n));
  for (unsigned char c : b) {
    if (c != v) return false;
  }
  return true;
}

// Pages of [p, p+n) that hold memory (mincore: for shared memory, whether
// the page exists at all).
std::size_t resident_pages(CUdeviceptr p, std::size_t n) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v(n / page);
  SIM_CHECK(mincore(host(p), n, v.data()) == 0);
  std::size_t k = 0;
  for (unsigned char c : v) k += c & 1;
  return k;
}

// 77 when the child faulted touching p.
int child_touches(CUdeviceptr p) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    struct sigaction sa{};
    sa.sa_handler = [](int) { _exit(77); };
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
    alarm(10);
    host(p)[0] = 0xee;
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  SIM_CHECK(WIFEXITED(status));
  return WEXITSTATUS(status);
}

void checks() {
  const CUmemAllocationProp prop = device_prop();
  const std::size_t base_used = used();

  // A handle of two pages, mapped whole at two places at once.
  CUmemGenericAllocationHandle h = 0;
  SIM_CU_OK(cuMemCreate(&h, 2 * kPage, &prop, 0));
  SIM_CHECK(used() == base_used + 2 * kPage);
  CUdeviceptr va = 0;
  SIM_CU_OK(cuMemAddressReserve(&va, 8 * kPage, 0, 0, 0));
  const CUdeviceptr a = va, b = va + 4 * kPage;
  SIM_CU_OK(cuMemMap(a, 2 * kPage, 0, h, 0));
  SIM_CU_OK(cuMemMap(b, 2 * kPage, 0, h, 0));
  SIM_EXPECT_CU(cuMemcpyHtoD(a, "x", 1), CUDA_ERROR_INVALID_VALUE);  // not accessible yet
  allow(a, 2 * kPage);
  allow(b, 2 * kPage);
  SIM_CU_OK(cuMemsetD8(a, 0x11, 2 * kPage));
  SIM_CHECK(all(b, 2 * kPage, 0x11));
  host(b)[2 * kPage - 1] = 0x22;  // the host sees device memory directly
  SIM_CHECK(host(a)[2 * kPage - 1] == 0x22);
  SIM_CU_OK(cuMemsetD8(b + kPage, 0x33, kPage));
  SIM_CHECK(all(a, kPage, 0x11) && all(a + kPage, kPage, 0x33));
  SIM_CHECK(used() == base_used + 2 * kPage);  // mappings take no capacity

  // The first page only, mapped a third time.
  const CUdeviceptr c = va + 7 * kPage;
  SIM_CU_OK(cuMemMap(c, kPage, 0, h, 0));
  allow(c, kPage);
  SIM_CHECK(all(c, kPage, 0x11));
  SIM_CU_OK(cuMemUnmap(c, kPage));

  // Released while mapped: the memory stays until the last unmap.
  SIM_CU_OK(cuMemRelease(h));
  SIM_CHECK(used() == base_used + 2 * kPage);
  SIM_CU_OK(cuMemUnmap(a, 2 * kPage));
  SIM_CHECK(all(b, kPage, 0x11) && all(b + kPage, kPage, 0x33));
  SIM_CHECK(used() == base_used + 2 * kPage);
  // Retained again from its mapping, then mapped afresh: same bytes.
  CUmemGenericAllocationHandle again = 0;
  SIM_CU_OK(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(b)));
  SIM_CHECK(again == h);
  SIM_CU_OK(cuMemUnmap(b, 2 * kPage));
  SIM_CHECK(used() == base_used + 2 * kPage);  // still held by the retain
  SIM_CU_OK(cuMemMap(a + kPage, 2 * kPage, 0, h, 0));
  allow(a + kPage, 2 * kPage);
  SIM_CHECK(all(a + kPage, kPage, 0x11) && all(a + 2 * kPage, kPage, 0x33));
  SIM_CU_OK(cuMemRelease(h));
  SIM_CU_OK(cuMemUnmap(a + kPage, 2 * kPage));
  SIM_CHECK(used() == base_used);
  SIM_EXPECT_CU(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);

  // Data survives unmap and remap with no mapping in between.
  SIM_CU_OK(cuMemCreate(&h, kPage, &prop, 0));
  SIM_CU_OK(cuMemMap(va, kPage, 0, h, 0));
  allow(va, kPage);
  SIM_CU_OK(cuMemsetD8(va, 0x44, kPage));
  SIM_CU_OK(cuMemUnmap(va, kPage));
  SIM_CU_OK(cuMemMap(va + 5 * kPage, kPage, 0, h, 0));
  allow(va + 5 * kPage, kPage);
  SIM_CHECK(all(va + 5 * kPage, kPage, 0x44));
  // A forked child does not have the mapping.
  SIM_CHECK(child_touches(va + 5 * kPage) == 77);
  SIM_CHECK(host(va + 5 * kPage)[0] == 0x44);
  SIM_CU_OK(cuMemUnmap(va + 5 * kPage, kPage));
  SIM_CU_OK(cuMemRelease(h));
  SIM_CHECK(used() == base_used);

  // A destroyed handle's pages went back to the kernel: a new handle holds
  // none until written, and reads zeros.
  SIM_CU_OK(cuMemCreate(&h, kPage, &prop, 0));
  SIM_CU_OK(cuMemMap(va, kPage, 0, h, 0));
  SIM_CHECK(resident_pages(va, kPage) == 0);
  allow(va, kPage);
  SIM_CHECK(all(va, kPage, 0));
  SIM_CU_OK(cuMemUnmap(va, kPage));
  SIM_CU_OK(cuMemRelease(h));

  // Many handles alive at once under a small descriptor limit: a handle is
  // not a file.
  struct rlimit nofile{};
  SIM_CHECK(getrlimit(RLIMIT_NOFILE, &nofile) == 0);
  struct rlimit few = nofile;
  few.rlim_cur = 64;
  SIM_CHECK(setrlimit(RLIMIT_NOFILE, &few) == 0);
  std::vector<CUmemGenericAllocationHandle> hs(200);
  for (auto& x : hs) SIM_CU_OK(cuMemCreate(&x, kPage, &prop, 0));
  SIM_CHECK(used() == base_used + hs.size() * kPage);
  for (auto x : hs) SIM_CU_OK(cuMemRelease(x));
  SIM_CHECK(setrlimit(RLIMIT_NOFILE, &nofile) == 0);
  SIM_CHECK(used() == base_used);
  SIM_CU_OK(cuMemAddressFree(va, 8 * kPage));
}

double ns_per_page(int n, bool touch) {
  const CUmemAllocationProp prop = device_prop();
  CUmemAccessDesc acc{};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr va = 0;
  SIM_CU_OK(cuMemAddressReserve(&va, 64 * kPage, 0, 0, 0));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    const CUdeviceptr p = va + static_cast<CUdeviceptr>(i % 64) * kPage;
    CUmemGenericAllocationHandle h = 0;
    SIM_CU_OK(cuMemCreate(&h, kPage, &prop, 0));
    SIM_CU_OK(cuMemMap(p, kPage, 0, h, 0));
    SIM_CU_OK(cuMemRelease(h));
    SIM_CU_OK(cuMemSetAccess(p, kPage, &acc, 1));
    if (touch) host(p)[i % kPage] = 1;
    SIM_CU_OK(cuMemUnmap(p, kPage));
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  SIM_CU_OK(cuMemAddressFree(va, 64 * kPage));
  return ns / n;
}

}  // namespace

int main(int argc, char** argv) {
  const bool bench = argc == 3 && std::strcmp(argv[1], "--bench") == 0;
  if (!bench) {
    // A full disk, as survive_signals fill makes one: SIGXFSZ at its default
    // (it kills) and 64 KiB of file.
    signal(SIGXFSZ, SIG_DFL);
    const struct rlimit fsize{65536, 65536};
    SIM_CHECK(setrlimit(RLIMIT_FSIZE, &fsize) == 0);
  }
  SIM_CU_OK(cuInit(0));
  CUdevice dev = 0;
  SIM_CU_OK(cuDeviceGet(&dev, 0));
  char name[256] = {};
  SIM_CU_OK(cuDeviceGetName(name, sizeof name, dev));
  simtest::require_sim_name(name);
  CUcontext ctx = nullptr;
  SIM_CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
  SIM_CU_OK(cuCtxSetCurrent(ctx));
  if (bench) {
    const int n = std::atoi(argv[2]);
    SIM_CHECK(n > 0);
    ns_per_page(n / 10 + 1, false);  // warm up
    const double bare = ns_per_page(n, false);
    const double touched = ns_per_page(n, true);
    std::printf("per 2 MiB page: %.0f ns (create, map, release, set access, unmap); %.0f ns writing one byte\n",
                bare, touched);
    return 0;
  }
  checks();
  std::printf("sim_vmm_backing: OK\n");
  return 0;
}
