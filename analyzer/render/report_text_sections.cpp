#include "render/report_text_sections.h"

#include <algorithm>
#include <cstdio>

#include "cumemtrace/analyzer/units.h"
#include "analyze/report_figures.h"
#include "analyze/site_labels.h"

namespace cumemtrace::analyzer::detail {

namespace {

std::string delimiter_phrase(const ThreadIterations& it) {
  if (it.source == IterationInfo::Source::marks) {
    return (it.other_threads_marks ? "other threads' mark '" : "mark '") + it.mark + "'";
  }
  return "a period of " + plural(it.period_allocs, "allocation", "allocations");
}

// How the verdict was reached: one thread's iterations as before; several
// threads' each by their own ("delimited per thread (2 threads), each by a
// period of 4 allocations"), the threads that had none said.
std::string iterations_phrase(const IterationInfo& it) {
  if (it.threads.size() <= 1 && it.threads_without == 0) return "delimited by " + delimiter_phrase(it);
  std::vector<std::pair<std::string, std::uint64_t>> ways;  // delimiter, threads
  for (const ThreadIterations& t : it.threads) {
    const std::string way = delimiter_phrase(t);
    auto same = std::find_if(ways.begin(), ways.end(), [&](const auto& w) { return w.first == way; });
    if (same == ways.end()) ways.emplace_back(way, 1);
    else ++same->second;
  }
  std::string phrase = "delimited per thread (" + plural(it.threads.size(), "thread", "threads") + ")";
  if (ways.size() == 1) {
    phrase += (it.threads.size() > 1 ? ", each by " : ", by ") + ways.front().first;
  } else {
    for (std::size_t i = 0; i < ways.size(); ++i) {
      phrase += (i ? ", by " : ": by ") + ways[i].first + " in " + std::to_string(ways[i].second);
    }
  }
  if (it.threads_without > 0) {
    phrase += "; " + plural(it.threads_without, "thread", "threads") + " without iterations not judged";
  }
  return phrase;
}


std::string share(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? std::string("-") : percent(static_cast<double>(part) / static_cast<double>(whole));
}

std::string where(std::uint64_t t, int dev) { return "at " + format_seconds(t) + " on device " + std::to_string(dev); }

std::string short_peak(const Watermark& w, const PeakPhase& phase) {
  if (w.peak == 0) return "0 B";
  std::string line = format_bytes(w.peak) + " at " + format_seconds(w.peak_t);
  if (phase.range != kNoRange) line += " in phase '" + phase.path + "'";
  return line;
}

std::string errors_phrase(const Analysis& analysis) {
  std::string s;
  for (const auto& [what, count] : analysis.errors_by_what()) {
    if (!s.empty()) s += ", ";
    s += std::to_string(count) + " " + what;
  }
  return s;
}

}  // namespace

std::string per_iteration(const GrowthLeak& g) {
  const double rate = g.iterations == 0 ? 0.0
                                        : static_cast<double>(g.last_live_bytes - g.first_live_bytes) /
                                              static_cast<double>(g.iterations);
  if (rate >= 10.0) return format_bytes(g.bytes_per_iteration);
  char text[32];
  std::snprintf(text, sizeof text, "%.2f B", rate);
  return text;
}

std::string from_site(const SiteLabels& labels, std::uint64_t stack) {
  if (stack == 0) return "with no stack captured";
  return "from " + labels(stack) + " (" + stack_name(stack) + ")";
}

namespace {
// "from device_alloc ← load_weights", or "with no stack captured".
std::string site_phrase(const SiteLabels& labels, std::uint64_t stack) {
  return stack == 0 ? std::string("with no stack captured") : "from " + labels(stack);
}
}  // namespace

void write_summary(std::ostringstream& out, const TraceReader& reader, const Analysis& analysis,
                   const SiteLabels& labels, const GrowthResult& growth, const ReportOptions& options) {
  (void)options;
  const MemoryTotals& total = analysis.total();
  const ReaderStats& stats = reader.stats();
  out << "Summary\n";
  if (stats.truncated) {
    out << "  TRUNCATED:       the trace was cut after line " << stats.last_complete_line
        << "; every figure is as of the cut\n";
  }
  // Said first, as TRUNCATED is: `check` will not judge such a trace either.
  if (stats.end && stats.end->dropped > 0) {
    out << "  INCOMPLETE:      the writer dropped " << plural(stats.end->dropped, "event", "events")
        << "; leaks and peaks may be off\n";
  }
  if (stats.bad_lines > 0) {
    out << "  INCOMPLETE:      " << plural(stats.bad_lines, "line", "lines") << " could not be read (listed at the end)\n";
  }
  if (stats.end && stats.end->reason_text == "killed") {
    out << "  KILLED:          the process was killed and its trace completed afterwards; what was live then "
           "is no leak\n";
  }
  out << "  peak allocated:  " << short_peak(total.allocated, total.allocated_peak_phase) << "\n";
  out << "  peak reserved:   " << short_peak(total.reserved, total.reserved_peak_phase) << "\n";

  out << "  live at peak:    ";
  const std::vector<SiteAtPeak> top = analysis.top_at_peak(3);
  if (top.empty()) out << "nothing was allocated";
  for (std::size_t i = 0; i < top.size(); ++i) {
    out << (i ? "; " : "") << format_bytes(top[i].bytes) << " (" << share(top[i].bytes, total.allocated.peak)
        << ") " << site_phrase(labels, top[i].stack);
  }
  const std::size_t sites_at_peak = analysis.sites().sites_at_peak();
  if (sites_at_peak > top.size()) out << "; and " << plural(sites_at_peak - top.size(), "more site", "more sites");
  out << "\n";

  out << "  leaked at end:   ";
  if (total.live_allocations == 0) {
    out << "nothing, every allocation was freed\n";
  } else {
    const std::vector<LeakGroup> groups = analysis.leaks(0);
    out << format_bytes(total.allocated.current) << " in "
        << plural(total.live_allocations, "allocation", "allocations")
        << (stats.truncated ? " live when the trace was cut, " : " still live, ");
    const std::uint64_t first = groups.front().stack;
    const std::string site = site_phrase(labels, first);
    if (groups.size() == 1) {
      out << site << "\n";
    } else {
      out << "from " << plural(groups.size(), "call stack", "call stacks") << "; the most ("
          << format_bytes(groups.front().bytes) << ") " << site << "\n";
    }
    if (const std::uint64_t cached = live_bytes_held_by_pytorch_cache(analysis, groups); cached != 0) {
      out << "                   " << (cached == total.allocated.current ? "all" : format_bytes(cached) + " of it")
          << " held by PyTorch's caching allocator (libc10_cuda.so), which frees its segments only by exiting;"
             " check --suppressions with 'module:libc10_cuda.so' leaves them out\n";
    }
  }

  out << "  growth leaks:    ";
  if (growth.iterations.source == IterationInfo::Source::none && !growth.iterations.marker.empty()) {
    out << "not assessed: " << unassessed_marker_reason(growth.iterations.marker, growth.iterations.marker_count)
        << "\n";
  } else if (growth.iterations.source == IterationInfo::Source::none) {
    out << "not assessed: no iterations found (no mark repeats 3 times, no period in the allocations)\n";
  } else if (growth.leaks.empty()) {
    out << "none over " << plural(growth.iterations.count, "iteration", "iterations") << " ("
        << iterations_phrase(growth.iterations) << ")\n";
  } else {
    const GrowthLeak& g = growth.leaks.front();
    out << labels(g.stack) << " grows " << per_iteration(g)
        << " per iteration over " << plural(g.iterations, "iteration", "iterations");
    if (growth.leaks.size() > 1) out << "; and " << plural(growth.leaks.size() - 1, "more site", "more sites");
    out << " (" << iterations_phrase(growth.iterations) << ")\n";
  }

  out << "  fragmentation:   ";
  if (total.reserved.peak == 0) {
    out << "not known: no reserved memory (segments) in the trace\n";
  } else {
    out << percent(fragmentation_at_peak_reserved(total)) << " of reserved memory unused at the reserved peak";
    const FragmentationMoment& scattered = analysis.fragmentation().worst().cached_free_scattered;
    if (scattered.seen) {
      out << "; at worst " << percent(scattered.value) << " of the cached free memory lay outside its largest block";
    }
    out << "\n";
  }

  out << "  out of memory:   ";
  if (total.ooms == 0) {
    out << "never\n";
  } else {
    out << plural(total.ooms, "failure", "failures");
    if (!analysis.oom_records().empty()) {
      out << "; the first " << explain_oom(analysis.oom_records().front(), advice_context(reader.header()));
    }
    out << "\n";
  }
  if (analysis.errors() > 0) out << "  API misuse:      " << errors_phrase(analysis) << "\n";
}

void write_top_at_peak(std::ostringstream& out, const Analysis& analysis, const SiteLabels& labels,
                       const ReportOptions& options) {
  const MemoryTotals& total = analysis.total();
  if (total.allocated.peak == 0) return;
  out << "\nLive at the allocated peak (" << short_peak(total.allocated, total.allocated_peak_phase)
      << "), by call stack:\n";
  const std::vector<SiteAtPeak> top = analysis.top_at_peak(options.max_top_sites);
  for (std::size_t i = 0; i < top.size(); ++i) {
    const SiteAtPeak& s = top[i];
    out << "  " << i + 1 << ". " << format_bytes(s.bytes) << " (" << share(s.bytes, total.allocated.peak)
        << ") in " << plural(s.count, "allocation", "allocations") << " " << from_site(labels, s.stack) << "\n";
    write_stack(out, analysis, s.stack, options);
  }
  const std::size_t all = analysis.sites().sites_at_peak();
  if (all > top.size()) {
    out << "  ... and " << plural(all - top.size(), "more stack", "more stacks") << " (see --format json)\n";
  }
}

void write_growth(std::ostringstream& out, const Analysis& analysis, const SiteLabels& labels,
                  const GrowthResult& growth, const ReportOptions& options) {
  if (growth.iterations.source == IterationInfo::Source::none) return;
  out << "\nGrowth leaks (" << plural(growth.iterations.count, "iteration boundary", "iteration boundaries")
      << ", " << iterations_phrase(growth.iterations) << "): ";
  if (growth.leaks.empty()) {
    out << "none; no call site keeps more memory each iteration.\n";
    return;
  }
  out << plural(growth.leaks.size(), "call site keeps", "call sites keep") << " more memory each iteration\n";
  for (std::size_t i = 0; i < growth.leaks.size() && i < options.max_growth; ++i) {
    const GrowthLeak& g = growth.leaks[i];
    out << "  " << i + 1 << ". +" << per_iteration(g) << " per iteration over "
        << plural(g.iterations, "iteration", "iterations") << " (" << format_bytes(g.first_live_bytes) << " -> "
        << format_bytes(g.last_live_bytes) << ", rose in " << g.rising_iterations;
    if (g.threads > 1) out << "; the fastest of " << g.threads << " threads it grows in";
    out << ") " << from_site(labels, g.stack) << "\n";
    write_stack(out, analysis, g.stack, options);
  }
  if (growth.leaks.size() > options.max_growth) {
    out << "  ... and " << plural(growth.leaks.size() - options.max_growth, "more site", "more sites")
        << " (see --format json)\n";
  }
}

void write_phases(std::ostringstream& out, const Analysis& analysis, const ReportOptions& options) {
  const PhaseTracker& tracker = analysis.phases();
  if (tracker.pushes() == 0 && tracker.unbalanced_pops() == 0) return;
  const std::vector<PhaseRecord> ranges = analysis.phase_ranges();
  const auto open = std::count_if(ranges.begin(), ranges.end(), [](const PhaseRecord& r) { return !r.end_t; });
  out << "\nPhases: " << plural(tracker.pushes(), "mark range", "mark ranges");
  if (open > 0) out << ", " << open << " never popped";
  if (tracker.unbalanced_pops() > 0) {
    out << ", " << plural(tracker.unbalanced_pops(), "unbalanced pop", "unbalanced pops") << " ignored";
  }
  if (tracker.dropped_pushes() > 0) out << ", " << tracker.dropped_pushes() << " nested too deep (dropped)";
  if (tracker.omitted_records() > 0) out << ", " << tracker.omitted_records() << " not listed in --format json";
  if (tracker.ungrouped() > 0) out << ", " << tracker.ungrouped() << " of paths beyond the first 1000 not grouped";
  if (ranges.empty()) {
    out << "\n";
    return;
  }
  // Ranges of a loop differ only by their numbers ("step 41"): one line per
  // path with the numbers folded, showing the range that peaked highest.
  const std::vector<PhaseGroup> groups = analysis.phase_groups();
  const std::size_t shown = std::min(groups.size(), options.max_phases);
  out << "; by path with numbers folded, highest allocated peak first:\n";
  char line[160];
  std::snprintf(line, sizeof line, "  %7s %14s %14s  %s\n", "ranges", "peak allocated", "peak reserved", "path");
  out << line;
  for (std::size_t i = 0; i < shown; ++i) {
    const PhaseGroup& g = groups[i];
    const PhaseRecord& h = g.highest;
    std::snprintf(line, sizeof line, "  %7llu %14s %14s  ", static_cast<unsigned long long>(g.count),
                  format_bytes(h.peak_allocated).c_str(), format_bytes(g.peak_reserved).c_str());
    out << line << g.path;
    if (g.count > 1 || g.path != h.path) out << "  (highest: '" << h.path << "')";
    out << "  " << format_seconds(h.start_t) << " to "
        << (h.end_t ? format_seconds(*h.end_t) : std::string("the end (never popped)")) << "\n";
  }
  if (groups.size() > shown) {
    out << "  ... and " << plural(groups.size() - shown, "more path", "more paths") << " (see --format json)\n";
  }
}

void write_fragmentation(std::ostringstream& out, const Analysis& analysis) {
  const MemoryTotals& total = analysis.total();
  const FragmentationTracker& f = analysis.fragmentation();
  if (total.reserved.peak == 0 && f.samples() == 0) return;
  const FragmentationWorst& worst = f.worst();
  out << "\nFragmentation ("
      << (f.samples() == 0 ? std::string("from segments and allocations; no allocator samples")
                           : plural(f.samples(), "allocator sample", "allocator samples"))
      << ")\n";
  if (total.reserved.peak > 0) {
    out << "  at reserved peak:      " << percent(fragmentation_at_peak_reserved(total)) << " of "
        << format_bytes(total.reserved.peak) << " reserved was unused (at most "
        << format_bytes(total.allocated_at_reserved_peak) << " allocated while reserved stood at its peak";
    if (total.graph_at_reserved_peak > 0) {
      out << "; its " << format_bytes(total.graph_at_reserved_peak) << " of CUDA graph memory is not counted";
    }
    out << ")\n";
  }
  out << "  reserved unused:       ";
  if (worst.reserved_unused.seen) {
    out << "worst " << percent(worst.reserved_unused.value) << " (" << format_bytes(worst.reserved_unused.bytes)
        << " unused) " << where(worst.reserved_unused.t, worst.reserved_unused.dev) << "\n";
  } else {
    out << "never\n";
  }
  out << "  cached free scattered: ";
  if (worst.cached_free_scattered.seen) {
    out << "worst " << percent(worst.cached_free_scattered.value) << " ("
        << format_bytes(worst.cached_free_scattered.bytes) << " outside the largest free block) "
        << where(worst.cached_free_scattered.t, worst.cached_free_scattered.dev) << "\n";
  } else {
    out << (f.samples() == 0 ? "not known (no pool or oom events)\n" : "never\n");
  }
  out << "  inactive split:        ";
  if (worst.inactive_split_bytes.seen) {
    out << "worst " << format_bytes(worst.inactive_split_bytes.bytes) << " "
        << where(worst.inactive_split_bytes.t, worst.inactive_split_bytes.dev) << "\n";
  } else {
    out << (f.last_pool().empty() ? "not known (no pool events)\n" : "never\n");
  }
  out << "  rounding waste:        ";
  if (worst.rounding_waste.seen) {
    out << "worst " << percent(worst.rounding_waste.value) << " (" << format_bytes(worst.rounding_waste.bytes)
        << " of blocks beyond the requested sizes) " << where(worst.rounding_waste.t, worst.rounding_waste.dev)
        << "\n";
  } else {
    out << "none\n";
  }
  const FragmentationAtEnd end = fragmentation_at_end(analysis);
  out << "  at end:                reserved unused " << percent(end.reserved_unused);
  if (end.has_pool_sample) {
    out << ", cached free scattered " << percent(end.cached_free_scattered) << ", inactive split "
        << format_bytes(end.inactive_split_bytes);
  }
  out << ", rounding waste " << percent(end.rounding_waste) << "\n";
}

void write_ooms(std::ostringstream& out, const TraceReader& reader, const Analysis& analysis,
                const SiteLabels& labels, const ReportOptions& options) {
  const std::vector<OomRecord>& ooms = analysis.oom_records();
  if (analysis.total().ooms == 0) return;
  out << "\nOut of memory: " << plural(analysis.total().ooms, "failure", "failures") << "\n";
  const OomAdviceContext context = advice_context(reader.header());
  for (std::size_t i = 0; i < ooms.size() && i < options.max_ooms; ++i) {
    const OomRecord& o = ooms[i];
    out << "  " << i + 1 << ". " << explain_oom(o, context) << "\n";
    out << "       api " << o.api << " " << from_site(labels, o.stack) << "\n";
    write_stack(out, analysis, o.stack, options);
  }
  if (analysis.total().ooms > std::min(ooms.size(), options.max_ooms)) {
    out << "  ... and " << analysis.total().ooms - std::min(ooms.size(), options.max_ooms) << " more\n";
  }
}

void write_errors(std::ostringstream& out, const Analysis& analysis) {
  if (analysis.errors() == 0) return;
  out << "\nThe program misused the memory API " << plural(analysis.errors(), "time", "times")
      << " (error events): " << errors_phrase(analysis) << ".\n";
}

}  // namespace cumemtrace::analyzer::detail
