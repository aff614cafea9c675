// Times every call the simulated device's cost table prices (tests/sim/
// costs/*.json, SIMCUDA_COSTS; tests/sim/README.md, "Time") on the device it
// runs on, and writes the table, measured, in the same JSON format:
//
//   sim_cost_probe OUT.json [REPETITIONS]     (default 128)
//
// On a GPU (scripts/gpu-check.sh, check sim.costs) it gives the figures the
// sim should charge: the file is what a session with the GPU commits as
// tests/sim/costs/h100.json. On the sim with a table (ctest
// sim_cost_probe.h100) it measures what the sim charges, which
// tests/apps/check_sim_costs.py holds against the table.
//
// Each call is timed alone on the host's steady clock, REPETITIONS times
// after a few untimed ones (first calls pay for lazy set-up), and described
// by its median and 90th percentile. Calls with a size are timed at 2 MiB
// and 32 MiB (1 and 16 granules): per_granule_us is the slope between the
// two medians and per_call_us what is left at one granule, both at least 0.
// The VMM calls work on 2 MiB-granular handles, one handle per mapping, as
// PyTorch's expandable segments and GMLake do; cuCtxSynchronize is timed
// with nothing queued (its own cost, not a wait).
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "sim_driver_test.h"

namespace {

constexpr std::size_t kGranule = std::size_t{2} << 20;
constexpr std::size_t kSizes[] = {kGranule, 16 * kGranule};
constexpr int kWarmup = 4;

using Clock = std::chrono::steady_clock;

// The host time one call takes, in microseconds; the call must succeed.
template <typename F>
double time_us(const char* what, F call) {
  const Clock::time_point t0 = Clock::now();
  const CUresult r = call();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  if (r != CUDA_SUCCESS) SIM_FAIL("%s returned %d", what, static_cast<int>(r));
  return us;
}

// A call's timings, by the size it was called with (0: a call without one).
struct Call {
  bool sized = false;
  std::map<std::size_t, std::vector<double>> us;
};
std::map<std::string, Call> g_calls;
bool g_recording = false;

void record(const char* name, std::size_t bytes, double us) {
  if (!g_recording) return;
  Call& c = g_calls[name];
  c.sized = bytes != 0;
  c.us[bytes].push_back(us);
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const std::size_t i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[i];
}

#define TIMED(NAME, BYTES, CALL) record(NAME, BYTES, time_us(#CALL, [&] { return CALL; }))

void vmm_round(CUdevice dev, std::size_t bytes) {
  const CUmemAllocationProp prop = simtest::vmm_prop(dev);
  const CUmemAccessDesc access = simtest::vmm_access(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, dev);
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  TIMED("cuMemAddressReserve", bytes, cuMemAddressReserve(&va, bytes, 0, 0, 0));
  TIMED("cuMemCreate", bytes, cuMemCreate(&h, bytes, &prop, 0));
  TIMED("cuMemMap", bytes, cuMemMap(va, bytes, 0, h, 0));
  TIMED("cuMemSetAccess", bytes, cuMemSetAccess(va, bytes, &access, 1));
  TIMED("cuMemUnmap", bytes, cuMemUnmap(va, bytes));
  TIMED("cuMemRelease", bytes, cuMemRelease(h));
  TIMED("cuMemAddressFree", bytes, cuMemAddressFree(va, bytes));
}

void alloc_round(std::size_t bytes) {
  CUdeviceptr p = 0;
  TIMED("cuMemAlloc", bytes, cuMemAlloc(&p, bytes));
  TIMED("cuMemFree", bytes, cuMemFree(p));
}

void event_round(CUstream recorder, CUstream waiter) {
  CUevent e = nullptr;
  TIMED("cuEventCreate", 0, cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  TIMED("cuEventRecord", 0, cuEventRecord(e, recorder));
  SIM_CU_OK(cuStreamSynchronize(recorder));
  TIMED("cuEventQuery", 0, cuEventQuery(e));
  TIMED("cuStreamWaitEvent", 0, cuStreamWaitEvent(waiter, e, 0));
  SIM_CU_OK(cuStreamSynchronize(waiter));
  TIMED("cuEventDestroy", 0, cuEventDestroy(e));
  TIMED("cuCtxSynchronize", 0, cuCtxSynchronize());
}

// The kernel module's version ("580.159.04") where the NVIDIA driver is
// loaded, else the CUDA version the driver API reports.
std::string driver_version() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (std::getline(in, line)) {
    const std::size_t k = line.find("Kernel Module");
    if (k != std::string::npos) {
      std::istringstream words(line.substr(k + 13));
      std::string v;
      if (words >> v) return v;
    }
  }
  int v = 0;
  SIM_CU_OK(cuDriverGetVersion(&v));
  return "CUDA " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) + " driver API";
}

std::string json_text(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", v);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) SIM_FAIL("usage: sim_cost_probe OUT.json [REPETITIONS]");
  const char* out_path = argv[1];
  const int reps = argc == 3 ? std::atoi(argv[2]) : 128;
  if (reps < 8) SIM_FAIL("at least 8 repetitions");

  std::string name;
  const CUdevice dev = simtest::primary_context_current(&name);
  CUstream recorder = nullptr, waiter = nullptr;
  SIM_CU_OK(cuStreamCreate(&recorder, CU_STREAM_NON_BLOCKING));
  SIM_CU_OK(cuStreamCreate(&waiter, CU_STREAM_NON_BLOCKING));
  SIM_CU_OK(cuCtxSynchronize());

  for (int pass = 0; pass < 2; ++pass) {
    g_recording = pass == 1;
    const int n = g_recording ? reps : kWarmup;
    for (std::size_t bytes : kSizes) {
      for (int i = 0; i < n; ++i) vmm_round(dev, bytes);
      for (int i = 0; i < n; ++i) alloc_round(bytes);
    }
    for (int i = 0; i < n; ++i) event_round(recorder, waiter);
  }

  char date[16];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  const std::string driver = driver_version();
  std::ostringstream json, summary;
  json << "{\n  \"note\": "
       << json_text("Measured by tests/apps/sim_cost_probe: " + std::to_string(reps) +
                    " timed calls of each after " + std::to_string(kWarmup) +
                    " untimed; per_call_us and per_granule_us fitted to the medians at 2 MiB and 32 MiB "
                    "(1 and 16 granules), each at least 0; samples hold the medians and 90th percentiles.")
       << ",\n  \"device\": " << json_text(name) << ",\n  \"driver\": " << json_text(driver)
       << ",\n  \"date\": " << json_text(date) << ",\n  \"calls\": {";
  summary << "sim_cost_probe: " << name << ", driver " << driver << ", medians of " << reps << ":";
  const char* sep = "\n";
  for (const auto& [call, c] : g_calls) {
    const std::size_t a = kSizes[0], b = kSizes[1];
    const double ga = static_cast<double>(a / kGranule), gb = static_cast<double>(b / kGranule);
    double per_call = quantile(c.us.begin()->second, 0.5), per_granule = 0;
    if (c.sized) {
      const double ma = quantile(c.us.at(a), 0.5), mb = quantile(c.us.at(b), 0.5);
      per_granule = std::max(0.0, (mb - ma) / (gb - ga));
      per_call = std::max(0.0, ma - per_granule * ga);
    }
    json << sep << "    " << json_text(call) << ": {\"per_call_us\": " << num(per_call)
         << ", \"per_granule_us\": " << num(per_granule) << ", \"measured\": true,\n      \"source\": "
         << json_text("sim_cost_probe on " + name + ", driver " + driver + ", " + date)
         << ",\n      \"samples\": [";
    const char* sample_sep = "";
    for (const auto& [bytes, us] : c.us) {
      json << sample_sep << "{\"bytes\": " << bytes << ", \"reps\": " << us.size()
           << ", \"median_us\": " << num(quantile(us, 0.5)) << ", \"p90_us\": " << num(quantile(us, 0.9))
           << "}";
      sample_sep = ", ";
    }
    json << "]}";
    sep = ",\n";
    summary << " " << call << " " << num(per_call);
    if (c.sized) summary << "+" << num(per_granule) << "/2MiB";
    summary << ";";
  }
  json << "\n  }\n}\n";
  std::ofstream out(out_path);
  out << json.str();
  out.close();
  if (!out) SIM_FAIL("cannot write %s", out_path);
  std::printf("%s us; written to %s\n", summary.str().c_str(), out_path);
  SIM_CU_OK(cuStreamDestroy(recorder));
  SIM_CU_OK(cuStreamDestroy(waiter));
  SIM_CU_OK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}
