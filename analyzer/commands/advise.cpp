#include "commands/advise.h"

#include "cumemtrace/analyzer/units.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <thread>

namespace cumemtrace::analyzer {

namespace {

using pool::kUnlimited;
constexpr std::size_t kMiB = std::size_t{1} << 20;

// The settings people try, as PyTorch's docs and its out-of-memory message
// name them (docs/source/notes/cuda.rst, "Optimizing memory usage with
// PYTORCH_CUDA_ALLOC_CONF"): expandable segments, which its message
// suggests; max_split_size_mb at the values forum posts copy; rounding;
// garbage collection, alone and in the combination posts give.
constexpr const char* kTorchSettings[] = {
    "expandable_segments:True",
    "max_split_size_mb:128",
    "max_split_size_mb:256",
    "max_split_size_mb:512",
    "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.8",
    "garbage_collection_threshold:0.6,max_split_size_mb:128",
};

// cumemtrace's pool: its default, ordinary segments only, and PyTorch's
// growth policy (cached segments kept until out-of-memory).
constexpr const char* kPoolSettings[] = {
    "expandable_segments:false",
    "segment_policy:pytorch",
};

// PyTorch's policy with a PYTORCH_CUDA_ALLOC_CONF value applied; the
// parser's errors for keys we cannot replay (backend:cudaMallocAsync, ...).
pool::PoolConfigParse torch_config(const std::string& setting) {
  return pool::parse_pool_config(setting, pool::pytorch_pool_config());
}

bool same_setting(const std::string& a, const std::string& b) {
  auto norm = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::erase(s, ' ');
    return s;
  };
  return norm(a) == norm(b);
}

// The run without a pool: every allocation its own cudaMalloc. Not replayed:
// reserved memory is the live memory (the driver's page rounding aside), and
// a device fits it when it holds the most the program needed at once.
void per_allocation_outcome(const std::vector<std::size_t>& capacities, const ReplayResult& unlimited,
                            CandidateOutcome& out) {
  out.peak_reserved = out.peak_reserved_unlimited = unlimited.peak_allocated;
  out.peak_allocated = unlimited.peak_allocated;
  std::size_t demand = 0;
  bool known = !capacities.empty();
  std::uint64_t failures = 0;
  for (std::size_t i = 0; i < unlimited.devices.size(); ++i) {
    const DeviceReplay& d = unlimited.devices[i];
    demand = std::max(demand, d.peak_demand);
    if (capacities[i] == 0) known = false;
    else if (d.peak_demand > capacities[i]) ++failures;
  }
  if (known) out.failures_on_device = failures;
  out.min.peak_live = unlimited.peak_allocated;
  out.min.peak_demand = demand;
  out.min.capacity = (demand + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
  out.min.found = true;
}

CandidateOutcome evaluate(const ReplayTrace& trace, const AdviceCandidate& candidate,
                          const std::vector<std::size_t>& capacities) {
  CandidateOutcome out;
  out.candidate = candidate;
  ReplayOptions options;
  options.config = candidate.config;
  options.device_wide = candidate.device_wide;
  options.stream_ordered = candidate.stream_ordered;
  options.capacity = kUnlimited;
  const ReplayResult unlimited = replay(trace, options);
  ++out.replays;
  if (candidate.kind == AdviceCandidate::Kind::per_allocation) {
    per_allocation_outcome(capacities, unlimited, out);
    return out;
  }
  out.peak_reserved = out.peak_reserved_unlimited = unlimited.peak_reserved;
  out.peak_allocated = unlimited.peak_allocated;
  const bool known = !capacities.empty() && std::none_of(capacities.begin(), capacities.end(),
                                                         [](std::size_t c) { return c == 0; });
  if (known) {
    options.capacity.reset();
    options.device_capacities = capacities;
    const ReplayResult on_device = replay(trace, options);
    ++out.replays;
    out.failures_on_device = on_device.ooms + on_device.failed_probes;
    out.peak_reserved = on_device.peak_reserved;
  }
  out.min = find_min_capacity(trace, options, 2 * kMiB, &unlimited);
  out.replays += out.min.replays;
  return out;
}

// Ordering of candidates that serve the same purpose: less reserved, then a
// smaller device, then the simpler (earlier) setting.
bool better(const CandidateOutcome& a, std::size_t ia, const CandidateOutcome& b, std::size_t ib) {
  if (a.peak_reserved != b.peak_reserved) return a.peak_reserved < b.peak_reserved;
  const std::size_t ca = a.min.found ? a.min.capacity : kUnlimited;
  const std::size_t cb = b.min.found ? b.min.capacity : kUnlimited;
  if (ca != cb) return ca < cb;
  return ia < ib;
}

// A setting of the program's own allocator (PyTorch's env var, or the way
// it already runs) is preferred to one that needs cumemtrace at run time.
bool needs_cumemtrace(const AdviceCandidate& c) {
  return c.kind == AdviceCandidate::Kind::torch_tensors || c.kind == AdviceCandidate::Kind::cumemtrace_pool;
}

void decide(const ReplayTrace& trace, Advice& advice) {
  const std::vector<CandidateOutcome>& all = advice.outcomes;
  const CandidateOutcome& base = all.front();
  const bool failed_in_run = !trace.ooms.empty();
  const bool capacity_known = base.failures_on_device.has_value();
  // Among the candidates that pass `ok`: the best without cumemtrace, unless
  // one with it reserves `margin` of the baseline less (or only such ones
  // pass).
  auto pick = [&](auto ok, std::size_t margin) -> std::optional<std::size_t> {
    std::optional<std::size_t> own, ours;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (!ok(all[i])) continue;
      std::optional<std::size_t>& best = needs_cumemtrace(all[i].candidate) ? ours : own;
      if (!best || better(all[i], i, all[*best], *best)) best = i;
    }
    if (own && ours && margin != kUnlimited && all[*own].peak_reserved > all[*ours].peak_reserved + margin) {
      return ours;
    }
    return own ? own : ours;
  };

  if (capacity_known && failed_in_run && *base.failures_on_device == 0) {
    // Nothing to avoid in the replay: say so, and advise as for a run that
    // did not fail.
    if (!advice.caveat.empty()) advice.caveat += " ";
    advice.caveat += "The run failed for lack of memory, but its replay with " + candidate_label(base.candidate) +
                    " on the same capacity does not: the device held memory this trace does not show (another "
                    "process, or allocations made before the trace began).";
  }
  if (capacity_known && *base.failures_on_device > 0) {
    // A failure is fixed most simply where the program already runs: any
    // setting of its own allocator that avoids it comes first.
    const auto avoider = pick([](const CandidateOutcome& o) { return o.failures_on_device == 0u; }, kUnlimited);
    if (avoider) {
      advice.verdict = Advice::Verdict::avoid_oom;
      advice.recommended = avoider;
      return;
    }
    advice.verdict = Advice::Verdict::needs_capacity;
    std::optional<std::size_t> smallest;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (!all[i].min.found) continue;
      if (!smallest || all[i].min.capacity < all[*smallest].min.capacity) smallest = i;
    }
    if (smallest) {
      advice.recommended = smallest;
      advice.needed_capacity = all[*smallest].min.capacity;
    }
    return;
  }
  // Without a failure, cumemtrace's pool is worth running for 5% of the peak.
  const auto best = pick([](const CandidateOutcome& o) { return o.failures_on_device.value_or(0) == 0; },
                         base.peak_reserved / 20);
  const std::size_t saving =
      best && all[*best].peak_reserved < base.peak_reserved ? base.peak_reserved - all[*best].peak_reserved : 0;
  // Less than 1% of the peak (or one 2 MiB page) is within what a rerun
  // varies by.
  if (!best || *best == 0 || saving < std::max<std::size_t>(base.peak_reserved / 100, 2 * kMiB)) {
    advice.verdict = Advice::Verdict::keep;
    advice.recommended = 0;
    return;
  }
  advice.verdict = Advice::Verdict::save;
  advice.recommended = best;
}

}  // namespace

AdviceFlavor advice_flavor(const ReplayTrace& trace) {
  const ReplayOrigin& o = trace.origin;
  const bool torch = o.torch_snapshot || o.torch_frames || o.torch_uncached || !o.torch_alloc_conf.empty();
  return torch ? AdviceFlavor::torch : AdviceFlavor::program;
}

std::vector<AdviceCandidate> advice_candidates(const ReplayTrace& trace, AdviceFlavor flavor,
                                               std::string* run_setting_note) {
  std::vector<AdviceCandidate> out;
  if (flavor == AdviceFlavor::torch) {
    // The run's own setting first (the baseline), when it can be replayed.
    std::string run_setting = trace.origin.torch_alloc_conf;
    if (!run_setting.empty()) {
      const pool::PoolConfigParse parsed = torch_config(run_setting);
      if (!parsed.ok()) {
        if (run_setting_note) {
          *run_setting_note = "the run's PYTORCH_CUDA_ALLOC_CONF=" + run_setting +
                              " cannot be replayed (" + parsed.errors.front() + "); PyTorch's defaults stand in for it";
        }
        run_setting.clear();
      }
    }
    AdviceCandidate base;
    base.kind = AdviceCandidate::Kind::torch;
    base.setting = run_setting;
    base.as_run = trace.origin.run_setting_known;
    base.config = torch_config(run_setting).config;
    // PyTorch's allocator serves every tensor in stream order, whatever the
    // trace recorded (a --torch-tensors run records cudaMalloc calls).
    base.stream_ordered = true;
    out.push_back(base);
    if (!run_setting.empty()) {
      AdviceCandidate defaults;
      defaults.config = torch_config("").config;
      defaults.stream_ordered = true;
      out.push_back(defaults);
    }
    for (const char* setting : kTorchSettings) {
      if (same_setting(setting, run_setting)) continue;
      AdviceCandidate c;
      c.setting = setting;
      c.config = torch_config(setting).config;
      c.stream_ordered = true;
      out.push_back(c);
    }
    AdviceCandidate ours;
    ours.kind = AdviceCandidate::Kind::torch_tensors;
    ours.config = pool::PoolConfig{};
    // Per tensor, PyTorch calls cudaMalloc and cudaFree.
    ours.device_wide = true;
    out.push_back(ours);
    return out;
  }
  const bool ran_in_pool = trace.pool_mode == "caching";
  AdviceCandidate passthrough;
  passthrough.kind = AdviceCandidate::Kind::per_allocation;
  passthrough.as_run = !ran_in_pool;
  AdviceCandidate pooled;
  pooled.kind = AdviceCandidate::Kind::cumemtrace_pool;
  pooled.as_run = ran_in_pool;
  out.push_back(ran_in_pool ? pooled : passthrough);
  out.push_back(ran_in_pool ? passthrough : pooled);
  for (const char* setting : kPoolSettings) {
    AdviceCandidate c;
    c.kind = AdviceCandidate::Kind::cumemtrace_pool;
    c.setting = setting;
    c.config = pool::parse_pool_config(setting).config;
    out.push_back(c);
  }
  return out;
}

Replayable classify_replayable(const ReplayTrace& trace, Advice& advice) {
  const ReplayOrigin& o = trace.origin;
  if (trace.allocs == 0 && trace.ooms.empty()) {
    advice.not_replayable = "The trace has no device allocation to replay.";
    return Replayable::empty;
  }
  const bool torch_per_tensor = o.torch_snapshot || (o.torch_uncached && o.caching_allocator == "PyTorch");
  if (!torch_per_tensor && o.allocs_from_caching_allocator * 2 > o.allocs_with_stack && o.allocs_with_stack > 0) {
    const std::string& fw = o.caching_allocator;
    advice.not_replayable = std::to_string(o.allocs_from_caching_allocator) + " of the trace's " +
                            std::to_string(trace.allocs) + " allocations come from " + fw +
                            "'s caching allocator: they are its segments, not the program's " +
                            (fw == "PyTorch" ? "tensors" : "arrays") +
                            ", and replaying segments says nothing about how another setting would place what "
                            "is in them.";
    if (fw == "PyTorch") {
      advice.instead =
          "Trace each tensor: `cumemtrace run --torch-tensors -- " +
          (trace.origin.argv.empty() ? std::string("<your command>") : shell_command(trace.origin.argv)) +
          "` (PyTorch then allocates per tensor), or record a snapshot with "
          "torch.cuda.memory._record_memory_history() and torch.cuda.memory._dump_snapshot(\"snap.pickle\"), then "
          "`cumemtrace import-torch snap.pickle -o snap.jsonl` and `cumemtrace advise snap.jsonl`.";
    } else if (fw == "CuPy") {
      advice.instead = "Trace each array: call cupy.cuda.set_allocator(None) before allocating (CuPy then calls "
                       "cudaMalloc per array) and run under cumemtrace again.";
    } else {
      advice.instead = "Turn " + fw + "'s caching off so that each buffer is allocated on its own, and trace again.";
    }
    return Replayable::segments;
  }
  constexpr std::uint64_t kFew = 16;
  if (!torch_per_tensor && o.allocs_with_stack == 0 && trace.allocs >= kFew &&
      o.allocs_in_2mib_multiples == trace.allocs) {
    advice.caveat = "Every allocation is a whole multiple of 2 MiB and the trace has no call stacks: if they are a "
                    "caching allocator's segments (PyTorch's, by default), this replays the segments, not the "
                    "tensors; trace with `cumemtrace run --torch-tensors` to be sure.";
  }
  return Replayable::yes;
}

std::string candidate_label(const AdviceCandidate& c) {
  std::string label;
  switch (c.kind) {
    case AdviceCandidate::Kind::torch: label = c.setting.empty() ? "PyTorch defaults" : c.setting; break;
    case AdviceCandidate::Kind::torch_tensors: label = "cumemtrace pool (run --torch-tensors)"; break;
    case AdviceCandidate::Kind::per_allocation: label = "cudaMalloc per allocation (no pool)"; break;
    case AdviceCandidate::Kind::cumemtrace_pool:
      label = c.setting.empty() ? "cumemtrace pool defaults" : "cumemtrace pool " + c.setting;
      break;
  }
  return c.as_run ? label + ", as run" : label;
}

std::string paste_line(const AdviceCandidate& c, const std::string& traced_command) {
  // Without the traced command (an imported snapshot), what a user pastes
  // into the shell that starts the job.
  const std::string command = traced_command.empty() ? "<your command>" : traced_command;
  switch (c.kind) {
    case AdviceCandidate::Kind::torch:
      if (c.setting.empty()) return traced_command.empty() ? "unset PYTORCH_CUDA_ALLOC_CONF" : command;
      if (traced_command.empty()) return "export PYTORCH_CUDA_ALLOC_CONF=" + shell_quote(c.setting);
      return "PYTORCH_CUDA_ALLOC_CONF=" + shell_quote(c.setting) + " " + command;
    case AdviceCandidate::Kind::torch_tensors: return "cumemtrace run --torch-tensors -- " + command;
    case AdviceCandidate::Kind::per_allocation: return "cumemtrace run --pool passthrough -- " + command;
    case AdviceCandidate::Kind::cumemtrace_pool:
      return c.setting.empty() ? "cumemtrace run -- " + command
                               : "CUMEMTRACE_POOL_CONF=" + shell_quote(c.setting) + " cumemtrace run -- " + command;
  }
  return command;
}

Advice advise(const ReplayTrace& trace, const AdviseOptions& options) {
  Advice advice;
  advice.path = trace.path;
  advice.allocations = trace.allocs;
  advice.run_ooms = trace.ooms;
  advice.command = shell_command(trace.origin.argv);
  advice.flavor = advice_flavor(trace);
  advice.replayable = classify_replayable(trace, advice);
  if (advice.replayable != Replayable::yes) {
    advice.verdict = Advice::Verdict::cannot_replay;
    return advice;
  }

  // The device each candidate must fit: --capacity, else what the run's
  // allocator could use when it failed (the device's total less what other
  // processes and the CUDA context held), else the device's total.
  bool from_oom = false, from_total = false;
  for (const ReplayDevice& d : trace.devices) {
    advice.devices.push_back(d.dev);
    std::size_t capacity = 0;
    if (options.capacity) {
      capacity = *options.capacity;
    } else if (d.usable_at_oom != 0) {
      capacity = d.usable_at_oom;
      from_oom = true;
    } else if (d.total != 0) {
      capacity = d.total;
      from_total = true;
    }
    advice.capacities.push_back(capacity);
  }
  if (options.capacity) advice.capacity_source = "--capacity";
  else if (from_oom && from_total) advice.capacity_source = "the run's (free at its out-of-memory failure, or the device's total)";
  else if (from_oom) advice.capacity_source = "what the run's allocator could use when it failed (reserved + the driver's free memory)";
  else if (from_total) advice.capacity_source = "the device's total";
  else advice.capacity_source = "unknown (the trace does not record the device's size; give --capacity)";

  const std::vector<AdviceCandidate> candidates = advice_candidates(trace, advice.flavor, &advice.run_setting_note);
  advice.outcomes.resize(candidates.size());
  const auto start = std::chrono::steady_clock::now();
  unsigned threads = options.jobs != 0 ? options.jobs : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, static_cast<unsigned>(candidates.size()));
  // Each candidate is independent (its own simulated device and pools): one
  // per task, taken in order by as many threads as cores.
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < candidates.size();) {
      advice.outcomes[i] = evaluate(trace, candidates[i], advice.capacities);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  advice.threads = threads;
  advice.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  decide(trace, advice);
  return advice;
}

}  // namespace cumemtrace::analyzer
