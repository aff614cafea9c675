// The pool's tuning harness (not the `cumemtrace replay` command): feeds the
// alloc/free events of cumemtrace traces through DevicePool on a simulated
// device and prints what the pool would have reserved, per trace and per
// configuration, so policy changes are judged by numbers.
//
//   pool_replay_harness [--capacity BYTES] [--conf TEXT]... TRACE.jsonl...
//
// Each --conf is a CUMEMTRACE_POOL_CONF text ("pytorch" is PyTorch's own
// policy); without any, the default configuration and PyTorch's are shown.
// Events with a `stream` are replayed stream-ordered (what a caching
// allocator's tensors are), others as cudaMalloc/cudaFree.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "cumemtrace/pool/device_pool.h"
#include "cumemtrace/pool/pool_config.h"
#include "cumemtrace/pool/simulated_upstream.h"

using namespace cumemtrace::pool;

namespace {

struct Event {
  bool alloc;
  bool stream_ordered;
  StreamHandle stream;
  std::uint64_t ptr;
  std::size_t size;
};

bool load(const char* path, std::vector<Event>* events, std::size_t* trace_peak_reserved) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  std::size_t reserved = 0;
  *trace_peak_reserved = 0;
  while (std::getline(in, line)) {
    if (line.find("\"ev\":\"alloc\"") == std::string::npos && line.find("\"ev\":\"free\"") == std::string::npos &&
        line.find("\"ev\":\"segment_") == std::string::npos)
      continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    const std::string ev = j.value("ev", "");
    if (ev == "segment_alloc" || ev == "segment_free") {
      const std::size_t size = j.value("size", std::size_t{0});
      reserved = ev == "segment_alloc" ? reserved + size : reserved - std::min(reserved, size);
      *trace_peak_reserved = std::max(*trace_peak_reserved, reserved);
      continue;
    }
    if (j.value("kind", "device") != "device") continue;
    Event e{};
    e.alloc = ev == "alloc";
    e.ptr = std::strtoull(j.value("ptr", "0").c_str(), nullptr, 16);
    e.size = j.value("size", std::size_t{0});
    if (j.contains("stream")) {
      e.stream_ordered = true;
      e.stream = std::strtoull(j["stream"].get<std::string>().c_str(), nullptr, 16);
    }
    events->push_back(e);
  }
  return true;
}

struct Result {
  std::size_t peak_requested = 0, peak_allocated = 0, peak_reserved = 0;
  std::uint64_t ooms = 0, segments_in = 0, segments_out = 0, syncs = 0, orderings = 0;
  std::size_t mapped = 0, unmapped = 0, moved = 0;
  PoolStats at_peak;  // the pool when reserved memory peaked
};

Result replay(const std::vector<Event>& events, const PoolConfig& config, std::size_t capacity) {
  SimulatedUpstream upstream(capacity, /*vm=*/true, config.expandable_page_size);
  DevicePool pool(upstream, config);
  std::unordered_map<std::uint64_t, DevicePtr> address;  // trace pointer → pool pointer
  Result r;
  std::size_t requested = 0;
  std::unordered_map<std::uint64_t, std::size_t> sizes;
  for (const Event& e : events) {
    if (e.alloc) {
      const Allocation a = e.stream_ordered ? pool.allocate_async(e.size, e.stream) : pool.allocate(e.size);
      if (!a.ok()) {
        ++r.ooms;
        continue;
      }
      address[e.ptr] = a.ptr;
      sizes[e.ptr] = e.size;
      requested += e.size;
      r.peak_requested = std::max(r.peak_requested, requested);
      const PoolStats s = pool.stats();
      r.peak_allocated = std::max(r.peak_allocated, s.allocated);
      if (s.reserved > r.at_peak.reserved) r.at_peak = s;
    } else {
      auto it = address.find(e.ptr);
      if (it == address.end()) continue;  // freed before the trace began, or failed
      if (e.stream_ordered) pool.free_async(it->second, e.stream);
      else pool.free(it->second);
      requested -= sizes[e.ptr];
      address.erase(it);
    }
  }
  const PoolStats s = pool.stats();
  r.peak_reserved = s.peak_reserved;
  r.segments_in = s.upstream_allocs;
  r.segments_out = s.upstream_frees;
  r.syncs = s.synchronizes;
  r.orderings = s.orderings;
  r.mapped = upstream.mapped_bytes();
  r.unmapped = upstream.unmapped_bytes();
  r.moved = upstream.moved_bytes();
  return r;
}

double mib(std::size_t b) { return static_cast<double>(b) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> confs;
  std::vector<const char*> files;
  std::size_t capacity = kUnlimited;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--conf" && i + 1 < argc) confs.push_back(argv[++i]);
    else if (arg == "--capacity" && i + 1 < argc) capacity = std::strtoull(argv[++i], nullptr, 10);
    else files.push_back(argv[i]);
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: pool_replay_harness [--capacity BYTES] [--conf TEXT]... TRACE.jsonl...\n");
    return 2;
  }
  if (confs.empty()) confs = {"pytorch", ""};
  const bool verbose = std::getenv("HARNESS_VERBOSE") != nullptr;
  std::printf("%-42s %-40s %10s %10s %10s %7s %7s %6s %5s\n", "trace", "conf", "peak_req", "peak_alloc",
              "peak_resv", "r/a", "r/trace", "segs", "ooms");
  for (const char* file : files) {
    std::vector<Event> events;
    std::size_t trace_reserved = 0;
    if (!load(file, &events, &trace_reserved)) {
      std::fprintf(stderr, "cannot read %s\n", file);
      return 2;
    }
    std::string name = file;
    if (auto slash = name.rfind('/'); slash != std::string::npos) name = name.substr(slash + 1);
    for (const std::string& text : confs) {
      PoolConfig config;
      if (text == "pytorch") {
        config = pytorch_pool_config();
      } else {
        const PoolConfigParse p = parse_pool_config(text);
        for (const auto& e : p.errors) std::fprintf(stderr, "conf: %s\n", e.c_str());
        config = p.config;
      }
      const Result r = replay(events, config, capacity);
      std::printf("%-42s %-40s %10.0f %10.0f %10.0f %7.3f %7.3f %6" PRIu64 " %5" PRIu64 "\n", name.c_str(),
                  text.empty() ? "(default)" : text.c_str(), mib(r.peak_requested), mib(r.peak_allocated),
                  mib(r.peak_reserved), double(r.peak_reserved) / double(std::max<std::size_t>(1, r.peak_allocated)),
                  trace_reserved ? double(r.peak_reserved) / double(trace_reserved) : 0.0, r.segments_in, r.ooms);
      if (verbose) {
        const PoolStats& p = r.at_peak;
        std::printf("    at peak: allocated %.0f, inactive split %.0f, whole free segments %.0f, segments %zu, "
                    "free blocks %zu, largest free %.0f MiB; %llu synchronisations, %llu orderings, %llu segments "
                    "given back; mapped %.0f MiB (%.0f MiB moved), unmapped %.0f MiB\n",
                    mib(p.allocated), mib(p.inactive_split), mib(p.cached_free - p.pending_free - p.inactive_split),
                    p.segments, p.free_blocks, mib(p.largest_free), static_cast<unsigned long long>(r.syncs),
                    static_cast<unsigned long long>(r.orderings), static_cast<unsigned long long>(r.segments_out),
                    mib(r.mapped), mib(r.moved), mib(r.unmapped));
      }
    }
  }
  return 0;
}
