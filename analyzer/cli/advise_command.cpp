// `cumemtrace advise TRACE [--capacity SIZE] [--format text|json] [--jobs N]`:
// which allocator setting would have saved the run, measured by replaying
// its allocations through each (commands/advise.h).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "commands/advise.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "exit_codes.h"
#include "output_file.h"

namespace cumemtrace::cli {

CLI::App* add_advise_command(CLI::App& app, AdviseArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "advise",
      "Which allocator setting would have saved this run: its allocations replayed through PyTorch's allocator "
      "with its defaults and the PYTORCH_CUDA_ALLOC_CONF settings people try, and through cumemtrace's pool");
  cmd->add_option("trace", args.trace,
                  "Trace file (.jsonl or .jsonl.zst; - for standard input): a run with --torch-tensors, an "
                  "imported PyTorch snapshot, or any program that allocates per object")
      ->required();
  cmd->add_option("--capacity", args.capacity,
                  "The device every setting must fit (e.g. 80GiB); default: what the run's allocator could use when "
                  "it failed, else the trace's device total");
  cmd->add_option("--jobs", args.jobs, "Settings replayed at once; default: one per core")
      ->check(CLI::Range(1u, 1024u));
  cmd->add_option("--format", args.format, "Output format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", args.output, "Write the advice to this file instead of stdout");
  return cmd;
}

int advise_command(const AdviseArgs& args) {
  using namespace cumemtrace::analyzer;
  AdviseOptions options;
  options.jobs = args.jobs;
  if (args.capacity) {
    const std::optional<std::size_t> capacity = parse_capacity(*args.capacity);
    if (!capacity || *capacity == 0 || *capacity == pool::kUnlimited) {
      spdlog::error("--capacity: '{}' is not a size (e.g. 80GiB, 512MiB, 4096)", *args.capacity);
      return kExitUsage;
    }
    options.capacity = capacity;
  }
  try {
    const ReplayTrace trace = load_replay_trace(args.trace);
    const Advice advice = advise(trace, options);
    if (advice.replayable == Replayable::yes) {
      std::uint32_t replays = 0;
      for (const CandidateOutcome& o : advice.outcomes) replays += o.replays;
      spdlog::info("{} settings, {} replays of {} allocations in {:.2f} s on {} thread{}", advice.outcomes.size(),
                   replays, trace.allocs, advice.seconds, advice.threads, advice.threads == 1 ? "" : "s");
    }
    std::string text;
    if (args.format == "json") {
      nlohmann::ordered_json j;
      j["trace"] = trace.path;
      j["truncated"] = trace.truncated;
      j.update(advice_json(advice));
      text = j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    } else {
      text = render_advice_text(advice);
      if (trace.truncated) text = "Note: the trace was cut short; the advice covers what it recorded.\n" + text;
    }
    if (std::string error = write_output(args.output, text); !error.empty()) {
      spdlog::error("{}", error);
      return kExitUsage;
    }
    return advice.replayable == Replayable::yes ? kExitOk : kExitNotReplayable;
  } catch (const TraceError& e) {
    spdlog::error("{}", e.what());
    return kExitUsage;
  }
}

}  // namespace cumemtrace::cli
