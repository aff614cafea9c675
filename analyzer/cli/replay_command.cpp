// `cumemtrace replay TRACE [--pool-conf CONF] [--capacity SIZE] [--format text|json]`:
// runs the trace's allocations through the caching pool on a simulated device
// and says what it reserved, how fragmented it was and on how small a device
// the trace would have run (replay.h).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "cumemtrace/analyzer/units.h"
#include "exit_codes.h"
#include "output_file.h"
#include "commands/replay.h"

namespace cumemtrace::cli {

namespace {

using analyzer::DeviceReplay;
using analyzer::MinCapacity;
using analyzer::ReplayResult;
using analyzer::ReplayTrace;
using analyzer::format_fixed;
using analyzer::ratio_of;
using analyzer::round4;
using Json = nlohmann::ordered_json;

Json capacity_json(std::size_t capacity) { return capacity == pool::kUnlimited ? Json(nullptr) : Json(capacity); }

Json fragmentation_json(const pool::FragmentationMetrics& f) {
  Json j;
  j["unused_reserved"] = round4(f.unused_reserved);
  j["free_scatter"] = round4(f.free_scatter);
  j["inactive_split"] = f.inactive_split;
  j["rounding_waste"] = round4(f.rounding_waste);
  return j;
}

Json render_json(const ReplayTrace& trace, const std::string& conf, const pool::PoolConfig& config,
                 const ReplayResult& r, const MinCapacity& m) {
  Json j;
  j["trace"] = trace.path;
  j["pool_conf"] = conf;
  j["pool_config"] = Json::parse(pool::pool_config_json(config));
  j["recorded"] = {{"pool", trace.pool_mode},
                   {"peak_reserved", trace.trace_peak_reserved},
                   {"peak_allocated", trace.trace_peak_allocated},
                   {"truncated", trace.truncated}};
  j["allocs"] = trace.allocs;
  j["frees"] = trace.frees;
  j["unknown_frees"] = trace.unknown_frees;
  j["lost_frees"] = trace.lost_frees;
  j["skipped_host_or_managed"] = trace.skipped_kind;
  j["peak_reserved"] = r.peak_reserved;
  j["peak_allocated"] = r.peak_allocated;
  j["peak_allocated_blocks"] = r.peak_allocated_blocks;
  j["reserved_over_allocated"] = round4(ratio_of(r.peak_reserved, r.peak_allocated));
  j["ooms"] = r.ooms;
  j["run_oom_requests"] = r.probes;           // the trace's own failures, tried again
  j["run_oom_requests_failed"] = r.failed_probes;
  j["frees_of_failed"] = r.frees_of_failed;
  j["invalid_frees"] = r.invalid_frees;
  j["segments_allocated"] = r.upstream_allocs;
  j["segments_freed"] = r.upstream_frees;
  j["synchronizes"] = r.synchronizes;
  j["orderings"] = r.orderings;
  if (r.steady.steps > 0) {
    // The program's steps (its most frequent mark), and what the pool asked
    // of the device in the steady ones (after the first quarter).
    const auto per_step = [&r](std::uint64_t n) { return round4(ratio_of(n, r.steady.steady)); };
    j["steps"] = {{"mark", trace.step_mark},
                  {"count", r.steady.steps},
                  {"steady", r.steady.steady},
                  {"steady_segments_allocated", r.steady.upstream_allocs},
                  {"steady_segments_freed", r.steady.upstream_frees},
                  {"steady_synchronizes", r.steady.synchronizes},
                  {"per_steady_step",
                   {{"segments_allocated", per_step(r.steady.upstream_allocs)},
                    {"segments_freed", per_step(r.steady.upstream_frees)},
                    {"synchronizes", per_step(r.steady.synchronizes)}}}};
  }
  j["fragmentation_at_peak"] = fragmentation_json(r.at_peak);
  j["fragmentation_at_end"] = fragmentation_json(r.at_end);
  j["min_capacity"] = m.found ? Json(m.capacity) : Json(nullptr);
  j["min_capacity_over_peak_live"] = m.found ? Json(round4(ratio_of(m.capacity, m.peak_live))) : Json(nullptr);
  j["min_capacity_peak_live"] = m.peak_live;
  j["min_capacity_replays"] = m.replays;
  Json devices = Json::array();
  for (const DeviceReplay& d : r.devices) {
    Json dj;
    dj["dev"] = d.dev;
    dj["capacity"] = capacity_json(d.capacity);
    dj["peak_reserved"] = d.peak_reserved;
    dj["peak_allocated"] = d.peak_allocated;
    dj["peak_allocated_blocks"] = d.peak_allocated_blocks;
    dj["ooms"] = d.ooms;
    dj["reserved_at_end"] = d.end.reserved;
    dj["allocated_at_end"] = d.end.requested;
    devices.push_back(std::move(dj));
  }
  j["devices"] = std::move(devices);
  return j;
}

std::string percent(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f%%", 100.0 * x);
  return text;
}

std::string fragmentation_text(const pool::FragmentationMetrics& f) {
  return "unused reserved " + percent(f.unused_reserved) + ", free space scattered " + percent(f.free_scatter) +
         ", inactive split " + analyzer::format_bytes(f.inactive_split) + ", rounding waste " +
         percent(f.rounding_waste);
}

std::string render_text(const ReplayTrace& trace, const std::string& conf, const ReplayResult& r, const MinCapacity& m) {
  using analyzer::format_bytes;
  std::ostringstream out;
  out << "cumemtrace replay: " << trace.path << "\n";
  out << "  pool:            " << (conf.empty() ? std::string("default") : conf) << "\n";
  out << "  recorded with:   " << (trace.pool_mode.empty() ? std::string("(not recorded)") : trace.pool_mode)
      << " pool, peak reserved " << format_bytes(trace.trace_peak_reserved) << ", peak allocated "
      << format_bytes(trace.trace_peak_allocated) << (trace.truncated ? " (truncated trace)" : "") << "\n";
  for (const DeviceReplay& d : r.devices) {
    out << "  device " << d.dev << ":        capacity "
        << (d.capacity == pool::kUnlimited ? std::string("unlimited") : format_bytes(d.capacity)) << "\n";
  }
  out << "\nReplayed " << r.allocs << " allocations and " << trace.frees << " frees";
  if (trace.unknown_frees + trace.lost_frees + trace.skipped_kind > 0) {
    out << " (skipped: " << trace.unknown_frees << " frees of unknown pointers, " << trace.lost_frees
        << " lost frees implied, " << trace.skipped_kind << " host or managed)";
  }
  out << "\n";
  out << "  peak reserved:   " << format_bytes(r.peak_reserved) << " (" << r.peak_reserved << " bytes)\n";
  out << "  peak allocated:  " << format_bytes(r.peak_allocated) << " requested, "
      << format_bytes(r.peak_allocated_blocks) << " in blocks\n";
  out << "  reserved / allocated: " << format_fixed(ratio_of(r.peak_reserved, r.peak_allocated), 4);
  if (trace.trace_peak_reserved > 0) {
    out << "   (recorded allocator: " << format_fixed(ratio_of(trace.trace_peak_reserved, trace.trace_peak_allocated), 4)
        << "; ours / recorded reserved: " << format_fixed(ratio_of(r.peak_reserved, trace.trace_peak_reserved), 4) << ")";
  }
  out << "\n";
  out << "  out of memory:   " << r.ooms << (r.ooms == 1 ? " time" : " times") << "\n";
  if (r.probes > 0) {
    out << "  the run's failed requests: " << r.probes << " tried again, " << r.failed_probes << " not served\n";
  }
  out << "  segments:        " << r.upstream_allocs << " obtained, " << r.upstream_frees << " given back, "
      << r.synchronizes << " synchronisations (the host waited), " << r.orderings << " orderings (it did not)\n";
  if (r.steady.steps > 0) {
    const auto per_step = [&r](std::uint64_t n) { return format_fixed(ratio_of(n, r.steady.steady), 2); };
    out << "  steps:           " << r.steady.steps << " (mark '" << trace.step_mark << "'); per steady step (the last "
        << r.steady.steady << "): " << per_step(r.steady.upstream_allocs) << " segments obtained, "
        << per_step(r.steady.upstream_frees) << " given back, " << per_step(r.steady.synchronizes)
        << " synchronisations\n";
  }
  out << "  fragmentation at the reserved peak: " << fragmentation_text(r.at_peak) << "\n";
  out << "  fragmentation at the end:           " << fragmentation_text(r.at_end) << "\n";
  if (m.found) {
    out << "  min capacity:    " << format_bytes(m.capacity) << " = "
        << format_fixed(ratio_of(m.capacity, m.peak_live), 4) << " x peak live (" << m.replays << " replays)\n";
  } else {
    out << "  min capacity:    not found (the trace fails even on the largest device tried)\n";
  }
  return out.str();
}

}  // namespace

CLI::App* add_replay_command(CLI::App& app, ReplayArgs& args) {
  CLI::App* cmd = app.add_subcommand("replay", "Replay a trace's allocations through the caching pool on a simulated device");
  cmd->add_option("trace", args.trace, "Trace file (.jsonl or .jsonl.zst; - for standard input)")->required();
  cmd->add_option("--pool-conf", args.pool_conf,
                  "Pool settings, CUMEMTRACE_POOL_CONF syntax (e.g. 'max_split_size_mb:128'), or 'pytorch' for "
                  "PyTorch's own policy; default: the pool's defaults");
  cmd->add_option("--capacity", args.capacity,
                  "Every device's capacity (e.g. 80GiB, unlimited); default: the trace's device total, else unlimited");
  cmd->add_option("--format", args.format, "Output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", args.output, "Write the result to this file instead of stdout");
  return cmd;
}

int replay_command(const ReplayArgs& args) {
  using namespace cumemtrace::analyzer;
  const pool::PoolConfigParse conf = parse_replay_pool_conf(args.pool_conf);
  if (!conf.ok()) {
    spdlog::error("--pool-conf: {}", conf.errors.front());
    return kExitUsage;
  }
  ReplayOptions options;
  options.config = conf.config;
  // Given empty (an unset shell variable) is an error, not the default capacity.
  if (args.capacity) {
    options.capacity = parse_capacity(*args.capacity);
    if (!options.capacity || *options.capacity == 0) {
      spdlog::error("--capacity: '{}' is not a size (e.g. 80GiB, 512MiB, 4096, unlimited)", *args.capacity);
      return kExitUsage;
    }
  }
  try {
    const ReplayTrace trace = load_replay_trace(args.trace);
    const ReplayResult result = replay(trace, options);
    const MinCapacity min_capacity = find_min_capacity(trace, options.config);
    std::string text;
    if (args.format == "json") {
      text = render_json(trace, args.pool_conf, options.config, result, min_capacity)
                 .dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
    } else {
      text = render_text(trace, args.pool_conf, result, min_capacity);
    }
    if (std::string error = write_output(args.output, text); !error.empty()) {
      spdlog::error("{}", error);
      return kExitUsage;
    }
    return kExitOk;
  } catch (const TraceError& e) {
    spdlog::error("{}", e.what());
    return kExitUsage;
  }
}

}  // namespace cumemtrace::cli
