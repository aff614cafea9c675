// `cumemtrace import-torch SNAPSHOT.pickle -o TRACE.jsonl`: converts a PyTorch
// memory snapshot (torch.cuda.memory._dump_snapshot) into a cumemtrace trace.
// The pickle is read by a restricted reader that refuses code (torch/pickle_reader.h).
#include <spdlog/spdlog.h>
#include <zstd.h>

#include <CLI/CLI.hpp>
#include <string>

#include "commands.h"
#include "exit_codes.h"
#include "output_file.h"
#include "torch/snapshot_import.h"
#include "torch/pickle_reader.h"

namespace cumemtrace::cli {

namespace {

// A name ending in .zst asks for a compressed trace (TRACE_FORMAT.md).
bool wants_zstd(const std::string& path) { return path.size() > 4 && path.ends_with(".zst"); }

std::string compress(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const std::size_t n = ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3);
  if (ZSTD_isError(n)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

}  // namespace

CLI::App* add_import_torch_command(CLI::App& app, ImportTorchArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "import-torch", "Convert a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) into a trace");
  cmd->add_option("snapshot", args.snapshot, "The snapshot's pickle file")->required();
  cmd->add_option("-o,--output", args.output, "The trace to write (.jsonl, or .jsonl.zst compressed; - for stdout)")
      ->required();
  return cmd;
}

int import_torch_command(const ImportTorchArgs& args) {
  using namespace cumemtrace::analyzer;
  try {
    const pickle::Document doc = pickle::Document::load_file(args.snapshot);
    TorchImportOptions options;
    options.source = args.snapshot;
    std::string trace;
    const TorchImportStats s = import_torch_snapshot(doc.root(), options, trace);
    if (wants_zstd(args.output)) trace = compress(trace);
    if (std::string error = write_output(args.output, trace); !error.empty()) {
      spdlog::error("{}", error);
      return kExitUsage;
    }
    spdlog::info("{}: {} events on {} device(s): {} allocs, {} frees, {} segment allocs, {} segment frees, {} ooms, {} stacks",
                 args.snapshot, s.trace_events, s.devices, s.allocs, s.frees, s.segment_allocs, s.segment_frees,
                 s.ooms, s.stacks);
    spdlog::info("live before the trace began: {} allocations ({} bytes) in {} segments ({} bytes){}",
                 s.seeded_allocs, s.seeded_alloc_bytes, s.seeded_segments, s.seeded_segment_bytes,
                 s.synthetic_times ? "; no time_us in the snapshot: t counts events (1 us apart)" : "");
    if (s.skipped_events > 0) {
      spdlog::warn("skipped {} events that could not be converted (first: {})", s.skipped_events, s.first_skip_reason);
    }
    if (s.inconsistencies > 0) {
      spdlog::warn("{} events contradict the snapshot's state (first: {})", s.inconsistencies, s.first_inconsistency);
    }
    return kExitOk;
  } catch (const pickle::PickleError& e) {
    spdlog::error("{}", e.what());
  } catch (const TorchImportError& e) {
    spdlog::error("{}: {}", args.snapshot, e.what());
  }
  return kExitUsage;
}

}  // namespace cumemtrace::cli
