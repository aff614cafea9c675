// The sim's model of time (tests/sim/README.md, "Time"): the cost table
// SIMCUDA_COSTS charges host time, which calls wait for the device, and the
// counters of the simcuda_counters extension that say so.
//
//   sim_costs MODE      MODE: h100 | off | file | bad-name | bad-call | bad-json
//
// h100, off and bad-name take SIMCUDA_COSTS from the environment (ctest sets
// h100, off and h101); file, bad-call and bad-json write a table to a
// temporary file and point SIMCUDA_COSTS at it before cuInit reads it. A bad
// value must give exactly one warning and charge nothing.
#include <cuda.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "sim_driver_test.h"
#include "simcuda_counters.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

SimcudaCounters counters() {
  SimcudaCounters c{};
  if (!simcuda_counters_read(&c)) SIM_FAIL("simcuda_counters is not exported by the driver");
  return c;
}

// Runs call (which must succeed) and returns the counters' change and its
// host time in microseconds.
template <typename F>
SimcudaCounters delta(F call, double* us = nullptr) {
  const SimcudaCounters a = counters();
  const auto t0 = std::chrono::steady_clock::now();
  call();
  const double took = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  const SimcudaCounters b = counters();
  if (us) *us = took;
  SimcudaCounters d{};
#define SIM_DELTA(field, what) d.field = b.field - a.field;
  SIMCUDA_COUNTER_FIELDS(SIM_DELTA)
#undef SIM_DELTA
  return d;
}

// The number of host waits for the device (wait_calls) a call makes.
template <typename F>
void expect_waits(const char* what, unsigned long long want, F call) {
  const SimcudaCounters d = delta(call);
  if (d.wait_calls != want) SIM_FAIL("%s: %llu host waits, expected %llu", what, d.wait_calls, want);
}

struct Vmm {
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  std::size_t size = 0;
};

// One call of every counted family (cuMemCreate twice, once refused; event
// records twice; three allocations and frees; two stream synchronizations).
void every_family(CUstream s, CUstream s2) {
  const CUmemAllocationProp prop = simtest::vmm_prop();
  const CUmemAccessDesc rw = simtest::vmm_access();
  const SimcudaCounters d = delta([&] {
    Vmm v{0, 0, 4 * kMiB};
    SIM_CU_OK(cuMemAddressReserve(&v.va, v.size, 0, 0, 0));
    SIM_CU_OK(cuMemCreate(&v.h, v.size, &prop, 0));
    SIM_EXPECT_CU(cuMemCreate(nullptr, v.size, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    SIM_CU_OK(cuMemMap(v.va, v.size, 0, v.h, 0));
    SIM_CU_OK(cuMemSetAccess(v.va, v.size, &rw, 1));
    SIM_CU_OK(cuMemUnmap(v.va, v.size));
    SIM_CU_OK(cuMemRelease(v.h));
    SIM_CU_OK(cuMemAddressFree(v.va, v.size));
    CUdeviceptr a = 0, b = 0, m = 0, q = 0;
    std::size_t pitch = 0;
    SIM_CU_OK(cuMemAlloc(&a, kMiB));
    SIM_CU_OK(cuMemAllocPitch(&b, &pitch, 1000, 4, 4));
    SIM_CU_OK(cuMemAllocManaged(&m, kMiB, CU_MEM_ATTACH_GLOBAL));
    SIM_CU_OK(cuMemFree(a));
    SIM_CU_OK(cuMemFree(b));
    SIM_CU_OK(cuMemFree(m));
    SIM_CU_OK(cuMemAllocAsync(&q, kMiB, s));
    SIM_CU_OK(cuMemFreeAsync(q, s));
    CUevent e = nullptr;
    SIM_CU_OK(cuEventCreate(&e, 0));
    SIM_CU_OK(cuEventRecord(e, s));
    SIM_CU_OK(cuEventRecordWithFlags(e, s, 0));
    SIM_CU_OK(cuStreamWaitEvent(s2, e, 0));
    SIM_CU_OK(cuEventSynchronize(e));
    SIM_CU_OK(cuEventQuery(e));
    SIM_CU_OK(cuStreamSynchronize(s));
    SIM_CU_OK(cuStreamSynchronize(s2));
    SIM_CU_OK(cuCtxSynchronize());
    SIM_CU_OK(cuEventDestroy(e));
  });
  struct {
    const char* name;
    unsigned long long got, want;
  } families[] = {
      {"mem_create", d.mem_create, 2},         {"mem_release", d.mem_release, 1},
      {"mem_map", d.mem_map, 1},               {"mem_unmap", d.mem_unmap, 1},
      {"mem_set_access", d.mem_set_access, 1}, {"mem_address_reserve", d.mem_address_reserve, 1},
      {"mem_address_free", d.mem_address_free, 1}, {"mem_alloc", d.mem_alloc, 3},
      {"mem_free", d.mem_free, 3},             {"mem_alloc_async", d.mem_alloc_async, 1},
      {"mem_free_async", d.mem_free_async, 1}, {"event_record", d.event_record, 2},
      {"event_query", d.event_query, 1},       {"stream_wait_event", d.stream_wait_event, 1},
      {"ctx_synchronize", d.ctx_synchronize, 1}, {"stream_synchronize", d.stream_synchronize, 2},
      {"event_synchronize", d.event_synchronize, 1}, {"event_create", d.event_create, 1},
      {"event_destroy", d.event_destroy, 1},   {"device_faults", d.device_faults, 0},
  };
  for (const auto& f : families) {
    if (f.got != f.want) SIM_FAIL("%s counted %llu calls, expected %llu", f.name, f.got, f.want);
  }
}

// Which calls make the host wait for the device: cuMemFree and the
// synchronizations, synchronous copies and sets; not the VMM calls, the
// allocations, records, queries and stream waits.
void host_waits(CUstream s) {
  const CUmemAllocationProp prop = simtest::vmm_prop();
  const CUmemAccessDesc rw = simtest::vmm_access();
  Vmm v{0, 0, 2 * kMiB};
  expect_waits("cuMemAddressReserve", 0, [&] { SIM_CU_OK(cuMemAddressReserve(&v.va, v.size, 0, 0, 0)); });
  expect_waits("cuMemCreate", 0, [&] { SIM_CU_OK(cuMemCreate(&v.h, v.size, &prop, 0)); });
  expect_waits("cuMemMap", 0, [&] { SIM_CU_OK(cuMemMap(v.va, v.size, 0, v.h, 0)); });
  expect_waits("cuMemSetAccess", 0, [&] { SIM_CU_OK(cuMemSetAccess(v.va, v.size, &rw, 1)); });
  expect_waits("cuMemsetD8 (synchronous)", 1, [&] { SIM_CU_OK(cuMemsetD8(v.va, 1, v.size)); });
  char host[64] = {};
  expect_waits("cuMemcpyHtoD (synchronous)", 1, [&] { SIM_CU_OK(cuMemcpyHtoD(v.va, host, sizeof host)); });
  expect_waits("cuMemUnmap", 0, [&] { SIM_CU_OK(cuMemUnmap(v.va, v.size)); });
  expect_waits("cuMemRelease", 0, [&] { SIM_CU_OK(cuMemRelease(v.h)); });
  expect_waits("cuMemAddressFree", 0, [&] { SIM_CU_OK(cuMemAddressFree(v.va, v.size)); });
  CUdeviceptr p = 0, q = 0;
  expect_waits("cuMemAlloc", 0, [&] { SIM_CU_OK(cuMemAlloc(&p, kMiB)); });
  expect_waits("cuMemFree", 1, [&] { SIM_CU_OK(cuMemFree(p)); });
  expect_waits("cuMemAllocAsync", 0, [&] { SIM_CU_OK(cuMemAllocAsync(&q, kMiB, s)); });
  expect_waits("cuMemFreeAsync", 0, [&] { SIM_CU_OK(cuMemFreeAsync(q, s)); });
  CUevent e = nullptr;
  SIM_CU_OK(cuEventCreate(&e, 0));
  expect_waits("cuEventRecord", 0, [&] { SIM_CU_OK(cuEventRecord(e, s)); });
  expect_waits("cuStreamWaitEvent", 0, [&] { SIM_CU_OK(cuStreamWaitEvent(s, e, 0)); });
  expect_waits("cuEventSynchronize", 1, [&] { SIM_CU_OK(cuEventSynchronize(e)); });
  expect_waits("cuEventQuery", 0, [&] { SIM_CU_OK(cuEventQuery(e)); });
  expect_waits("cuStreamSynchronize", 1, [&] { SIM_CU_OK(cuStreamSynchronize(s)); });
  SIM_CU_OK(cuEventDestroy(e));

  // Waits count whether or not work is outstanding; blocked ones only when
  // it is (SIMCUDA_ASYNC_LATENCY_US=20000: the memset takes 20 ms).
  SIM_CU_OK(cuMemAlloc(&p, kMiB));
  SIM_CU_OK(cuMemsetD8Async(p, 7, kMiB, s));
  SimcudaCounters d = delta([&] { SIM_CU_OK(cuStreamSynchronize(s)); });
  SIM_CHECK(d.wait_calls == 1 && d.blocked_waits == 1);
  if (d.blocked_us < 10000) SIM_FAIL("blocked %llu us on a 20 ms memset", d.blocked_us);
  d = delta([&] { SIM_CU_OK(cuCtxSynchronize()); });
  SIM_CHECK(d.wait_calls == 1 && d.blocked_waits == 0 && d.blocked_us == 0);
  SIM_CU_OK(cuMemsetD8Async(p, 7, kMiB, s));
  d = delta([&] { SIM_CU_OK(cuMemFree(p)); });  // its implicit synchronization
  SIM_CHECK(d.wait_calls == 1 && d.blocked_waits == 1);
}

// The struct's versioning: the sim fills no more than `size` bytes.
void versioning() {
  const simcuda_counters_fn fn = simcuda_counters_lookup();
  SIM_CHECK(fn != nullptr);
  SimcudaCounters c{};
  c.size = sizeof c.size + sizeof c.mem_create;
  c.mem_release = 12345;
  SIM_CHECK(fn(&c) == 0);
  SIM_CHECK(c.size == sizeof c.size + sizeof c.mem_create);
  SIM_CHECK(c.mem_release == 12345);  // beyond what the caller said it has
  c.size = 4;
  SIM_CHECK(fn(&c) == -1);
  SIM_CHECK(fn(nullptr) == -1);
  c.size = sizeof c + 64;  // a caller built with a newer header
  SIM_CHECK(fn(&c) == 0 && c.size == sizeof c);
}

// The charges of one call: what the table charged, and the host time.
struct Charge {
  unsigned long long charged_us;
  double took_us;
};
template <typename F>
Charge charge_of(F call) {
  double us = 0;
  const SimcudaCounters d = delta(call, &us);
  // The charge is host time: the call took at least what it was charged.
  if (us + 1 < static_cast<double>(d.charged_us)) {
    SIM_FAIL("charged %llu us in a call that took %.1f us", d.charged_us, us);
  }
  return {d.charged_us, us};
}

// What the table charges for VMM calls of 2 and 32 MiB, in mode `mode`.
void charges(const std::string& mode) {
  const CUmemAllocationProp prop = simtest::vmm_prop();
  CUmemGenericAllocationHandle small = 0, big = 0;
  const Charge create_small = charge_of([&] { SIM_CU_OK(cuMemCreate(&small, 2 * kMiB, &prop, 0)); });
  const Charge create_big = charge_of([&] { SIM_CU_OK(cuMemCreate(&big, 32 * kMiB, &prop, 0)); });
  CUdeviceptr va = 0;
  SIM_CU_OK(cuMemAddressReserve(&va, 4 * kMiB, 0, 0, 0));
  SIM_CU_OK(cuMemRelease(big));
  CUmemGenericAllocationHandle four = 0;
  SIM_CU_OK(cuMemCreate(&four, 4 * kMiB, &prop, 0));
  const Charge map = charge_of([&] { SIM_CU_OK(cuMemMap(va, 4 * kMiB, 0, four, 0)); });
  const Charge refused = charge_of([&] { SIM_EXPECT_CU(cuMemMap(va, 4 * kMiB, 0, four, 0), CUDA_ERROR_INVALID_VALUE); });
  const Charge unmap = charge_of([&] { SIM_CU_OK(cuMemUnmap(va, 4 * kMiB)); });
  SIM_CU_OK(cuMemRelease(four));
  SIM_CU_OK(cuMemRelease(small));
  SIM_CU_OK(cuMemAddressFree(va, 4 * kMiB));
  std::printf("%s: cuMemCreate 2 MiB charged %llu us (took %.0f), 32 MiB %llu us (took %.0f); "
              "cuMemMap 4 MiB %llu us (took %.0f); cuMemUnmap %llu us\n",
              mode.c_str(), create_small.charged_us, create_small.took_us, create_big.charged_us,
              create_big.took_us, map.charged_us, map.took_us, unmap.charged_us);
  SIM_CHECK(refused.charged_us == 0);  // a refused call is not charged
  if (mode == "h100") {
    // The shipped table, found by name: cuMemCreate costs per 2 MiB granule.
    SIM_CHECK(create_small.charged_us > 0);
    SIM_CHECK(create_big.charged_us >= 15 * create_small.charged_us);
    SIM_CHECK(create_big.took_us >= static_cast<double>(create_big.charged_us));
  } else if (mode == "file") {
    // The table written below: cuMemMap 500 us + 250 us per granule, nothing else.
    SIM_CHECK(map.charged_us == 1000);
    SIM_CHECK(map.took_us >= 1000);
    SIM_CHECK(create_small.charged_us == 0 && create_big.charged_us == 0 && unmap.charged_us == 0);
  } else {
    // No table (off, or a bad value fell back to off): nothing is charged.
    SIM_CHECK(create_small.charged_us == 0 && create_big.charged_us == 0);
    SIM_CHECK(map.charged_us == 0 && unmap.charged_us == 0);
    SIM_CHECK(counters().charged_us == 0);
  }
}

// A table for the modes that write their own; SIMCUDA_COSTS points at it.
void write_table(const std::string& mode, std::string* path) {
  const char* text = nullptr;
  if (mode == "file") {
    text = R"({"note": "sim_costs", "calls": {"cuMemMap": {"per_call_us": 500, "per_granule_us": 250, "measured": false, "source": "test"}}})";
  } else if (mode == "bad-call") {
    text = R"({"calls": {"cuMemMapp": {"per_call_us": 500, "per_granule_us": 0}}})";
  } else if (mode == "bad-json") {
    text = R"({"calls": {"cuMemMap": {"per_call_us": 500, "per_granule_us": 0})";
  } else {
    return;
  }
  char name[] = "/tmp/sim_costs_XXXXXX";
  const int fd = mkstemp(name);
  SIM_CHECK(fd >= 0);
  close(fd);
  std::ofstream(name) << text;
  *path = name;
  setenv("SIMCUDA_COSTS", name, 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) SIM_FAIL("usage: sim_costs h100|off|file|bad-name|bad-call|bad-json");
  const std::string mode = argv[1];
  std::string table;
  write_table(mode, &table);

  // cuInit reads SIMCUDA_COSTS: one warning for a bad value, none else.
  std::string name;
  CUdevice dev = 0;
  const std::string err = simtest::capture_stderr([&] { dev = simtest::primary_context_current(&name); });
  if (!table.empty()) unlink(table.c_str());
  simtest::require_sim_name(name.c_str());
  const int warnings = simtest::count_of(err, "simcuda: warning: ignoring SIMCUDA_COSTS");
  const int want = mode.rfind("bad-", 0) == 0 ? 1 : 0;
  if (warnings != want) SIM_FAIL("%d SIMCUDA_COSTS warnings, expected %d", warnings, want);
  CUstream s = nullptr, s2 = nullptr;
  SIM_CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  SIM_CU_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));

  versioning();
  every_family(s, s2);
  host_waits(s);
  charges(mode);

  SIM_CU_OK(cuStreamDestroy(s));
  SIM_CU_OK(cuStreamDestroy(s2));
  SIM_CU_OK(cuDevicePrimaryCtxRelease(dev));
  std::printf("sim_costs %s: OK\n", mode.c_str());
  return 0;
}
