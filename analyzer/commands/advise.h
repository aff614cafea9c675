// Which allocator setting would have saved a run, measured by replaying it
// (replay.h) through each candidate:
//
//   ReplayTrace trace = load_replay_trace("train.jsonl");
//   Advice advice = advise(trace, AdviseOptions{});
//   std::cout << render_advice_text(advice);
//
// A PyTorch run (an imported snapshot, a `--torch-tensors` trace, stacks
// through PyTorch, or PYTORCH_* allocator settings in the header) is replayed
// through PyTorch's caching-allocator policy (segment_policy:pytorch, the
// policy whose peaks match PyTorch's own on the snapshots) with its defaults
// and with the PYTORCH_CUDA_ALLOC_CONF settings people try, and through
// cumemtrace's pool as `cumemtrace run --torch-tensors` would use it. Any
// other program is replayed as it ran (one cudaMalloc per allocation) and
// through cumemtrace's pool with a few CUMEMTRACE_POOL_CONF settings.
//
// Each candidate gets its peak reserved memory on an unlimited device, its
// failures on the device the run had (when its size is known), and the
// smallest device it fits on; the advice is one line to paste and what it
// saves, or, for an out-of-memory failure no setting avoids, how much larger
// the device must be.
//
// A trace that holds a caching allocator's segments rather than the
// program's own objects (PyTorch under cumemtrace without --torch-tensors)
// is not replayed: the advice says so and what to record instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands/replay.h"

namespace cumemtrace::analyzer {

// Whose settings the candidates are.
enum class AdviceFlavor : std::uint8_t { torch, program };

struct AdviceCandidate {
  enum class Kind : std::uint8_t {
    torch,            // PyTorch's allocator with PYTORCH_CUDA_ALLOC_CONF=setting
    torch_tensors,    // cumemtrace's pool under `run --torch-tensors`
    per_allocation,   // no pool: one cudaMalloc per allocation (not replayed)
    cumemtrace_pool,  // cumemtrace's pool with CUMEMTRACE_POOL_CONF=setting
  };
  Kind kind = Kind::torch;
  std::string setting;  // the variable's value; empty: the defaults
  bool as_run = false;  // the setting the run had
  pool::PoolConfig config;
  bool device_wide = false;     // ReplayOptions::device_wide
  bool stream_ordered = false;  // ReplayOptions::stream_ordered
};

struct CandidateOutcome {
  AdviceCandidate candidate;
  // On the run's device where its size is known (then failures count the
  // requests it could not serve), else on an unlimited one.
  std::size_t peak_reserved = 0;
  std::size_t peak_reserved_unlimited = 0;
  std::size_t peak_allocated = 0;  // live bytes requested (the same for every candidate)
  // Requests not served on the run's device (its own failures included);
  // nullopt when the device's size is unknown.
  std::optional<std::uint64_t> failures_on_device;
  MinCapacity min;
  std::uint32_t replays = 0;
};

enum class Replayable : std::uint8_t { yes, segments, empty };

struct Advice {
  enum class Verdict : std::uint8_t {
    keep,            // no candidate saves enough to matter
    save,            // `recommended` reserves less
    avoid_oom,       // the run failed; `recommended` serves every request on its device
    needs_capacity,  // the run failed and no candidate fits its device
    cannot_replay,   // see Replayable
  };

  std::string path;
  AdviceFlavor flavor = AdviceFlavor::torch;
  Replayable replayable = Replayable::yes;
  std::string not_replayable;  // segments/empty: why, in a sentence or two
  std::string instead;         // segments: what to record instead
  std::string caveat;          // replayable but perhaps segments (no stacks to tell)
  std::string run_setting_note;  // the run's setting could not be replayed as such
  std::uint64_t allocations = 0;
  // Per device (ReplayTrace::devices' order): the capacity the candidates
  // are checked against (0 unknown), and where it came from.
  std::vector<int> devices;
  std::vector<std::size_t> capacities;
  std::string capacity_source;
  std::vector<ReplayOom> run_ooms;
  std::vector<CandidateOutcome> outcomes;  // in candidate order; the run's setting first
  Verdict verdict = Verdict::keep;
  std::optional<std::size_t> recommended;  // index into outcomes
  std::string command;  // the traced command, shell-quoted, or a placeholder
  std::size_t needed_capacity = 0;  // needs_capacity: the smallest device any candidate fits
  double seconds = 0;   // wall time of the replays
  unsigned threads = 0;
};

struct AdviseOptions {
  // Every device's capacity; nullopt: the run's (what its allocator could use
  // at its first out-of-memory failure, else the device's total).
  std::optional<std::size_t> capacity;
  unsigned jobs = 0;  // threads; 0: one per core
};

AdviceFlavor advice_flavor(const ReplayTrace& trace);
std::vector<AdviceCandidate> advice_candidates(const ReplayTrace& trace, AdviceFlavor flavor,
                                               std::string* run_setting_note = nullptr);

// Whether the trace's allocations can be replayed as the program's own
// objects; fills `not_replayable`, `instead` and `caveat`.
Replayable classify_replayable(const ReplayTrace& trace, Advice& advice);

Advice advise(const ReplayTrace& trace, const AdviseOptions& options);

// The line a user pastes for a candidate, e.g.
// "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py".
std::string paste_line(const AdviceCandidate& candidate, const std::string& command);
// How the table names a candidate.
std::string candidate_label(const AdviceCandidate& candidate);

// advise_render.cpp. The text is the section `report` prints too.
std::string render_advice_text(const Advice& advice);
nlohmann::ordered_json advice_json(const Advice& advice);

}  // namespace cumemtrace::analyzer
