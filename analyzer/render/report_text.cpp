#include <cstdio>
#include <sstream>

#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/analyzer/units.h"
#include "analyze/report_figures.h"
#include "analyze/stack_folding.h"
#include "render/report_graphs.h"
#include "render/report_text_sections.h"

namespace cumemtrace::analyzer {

namespace detail {

std::string bytes_exact(std::uint64_t bytes) {
  if (bytes < 1024) return format_bytes(bytes);
  return format_bytes(bytes) + " (" + std::to_string(bytes) + " bytes)";
}

std::string plural(std::uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string peak_line(const Watermark& w, const PeakPhase& phase) {
  if (w.peak == 0) return "0 B";
  std::string line = bytes_exact(w.peak) + " at " + format_seconds(w.peak_t);
  if (phase.range != kNoRange) line += " in phase '" + phase.path + "'";
  return line;
}

namespace {

void write_frame(std::ostringstream& out, std::size_t index, const OwnedFrame& f, bool full_name) {
  out << "       #" << index << " ";
  if (f.fn) out << (full_name ? *f.fn : readable_function_name(*f.fn));
  else out << (f.py ? std::string("??") : format_hex(f.ip));  // a Python frame has no address
  if (!f.file.empty()) {
    out << " at " << f.file;
    if (f.line) out << ":" << *f.line;
  }
  if (!f.module.empty()) {
    out << " (" << f.module;
    if (f.off) out << "+" << format_hex(*f.off);
    out << ")";
  }
  out << "\n";
}

}  // namespace

void write_frames(std::ostringstream& out, const std::vector<OwnedFrame>& frames, const ReportOptions& options) {
  if (options.full_stacks) {
    for (std::size_t i = 0; i < frames.size(); ++i) write_frame(out, i, frames[i], true);
    return;
  }
  // The user's frames, up to max_frames of them, with the framework's
  // between them folded (analyze/stack_folding.h).
  std::vector<FrameOwner> owners;
  owners.reserve(frames.size());
  for (const OwnedFrame& f : frames) owners.push_back(frame_owner(f));
  std::size_t shown = 0;
  for (const StackLine& line : fold_stack(owners)) {
    if (shown == options.max_frames) {
      out << "       ... " << plural(frames.size() - line.first, "more frame", "more frames") << "\n";
      break;
    }
    if (line.folded) {
      out << "       " << folded_text(line) << "\n";
    } else {
      write_frame(out, line.first, frames[line.first], false);
      ++shown;
    }
  }
}

void write_stack(std::ostringstream& out, const Analysis& analysis, std::uint64_t stack, const ReportOptions& options) {
  if (stack == 0) return;
  if (const std::vector<OwnedFrame>* frames = analysis.stacks().find(stack)) {
    write_frames(out, *frames, options);
  } else {
    out << "       (stack " << stack << " is not in the trace)\n";
  }
}

std::string stack_name(std::uint64_t stack) {
  return stack == 0 ? std::string("no stack captured") : "stack " + std::to_string(stack);
}

}  // namespace detail

namespace {

using detail::bytes_exact;
using detail::plural;

// What `import-torch` records in the header's config: the snapshot it read.
std::string imported_from(const TraceHeader& h) {
  const nlohmann::json config = nlohmann::json::parse(h.config_json, nullptr, false);
  if (!config.is_object() || config.value("source", "") != "torch_snapshot") return {};
  const auto snapshot = config.find("snapshot");
  return "(a PyTorch memory snapshot" +
         (snapshot != config.end() && snapshot->is_string() ? ": " + snapshot->get<std::string>() : std::string()) +
         ")";
}

std::string program_line(const TraceHeader& h) {
  if (h.argv.empty() && h.exe.empty()) {
    const std::string source = imported_from(h);
    return source.empty() ? "(unknown)" : source;
  }
  if (h.argv.empty()) return shell_quote(h.exe);
  return shell_command(h.argv);
}

void write_memory(std::ostringstream& out, const MemoryTotals& m) {
  out << "  peak allocated:  " << detail::peak_line(m.allocated, m.allocated_peak_phase) << "\n";
  out << "  peak reserved:   " << detail::peak_line(m.reserved, m.reserved_peak_phase) << "\n";
  out << "  allocations:     " << m.allocs;
  if (m.duplicate_allocs > 0) {
    out << " (" << m.duplicate_allocs << " reused a live address: their frees are missing)";
  }
  out << "\n";
  out << "  frees:           " << m.frees;
  if (m.unknown_frees > 0) out << " (" << m.unknown_frees << " of an address that was not allocated)";
  out << "\n";
  out << "  segments:        " << m.segment_allocs << " allocated, " << m.segment_frees << " freed";
  if (m.unknown_segment_frees > 0) out << " (" << m.unknown_segment_frees << " unknown)";
  out << "\n";
  if (m.ooms > 0) out << "  out of memory:   " << plural(m.ooms, "time", "times") << "\n";
  out << "  live at end:     " << plural(m.live_allocations, "allocation", "allocations") << ", "
      << bytes_exact(m.allocated.current) << "\n";
}

void write_leaks(std::ostringstream& out, const Analysis& analysis, const detail::SiteLabels& labels,
                 const ReportOptions& options) {
  const MemoryTotals& total = analysis.total();
  if (total.live_allocations == 0) {
    out << "Live at end: nothing, every allocation was freed.\n";
    return;
  }
  out << "Live at end, by call stack (possible leaks): " << bytes_exact(total.allocated.current)
      << " in " << plural(total.live_allocations, "allocation", "allocations") << "\n";
  const std::vector<LeakGroup> groups = analysis.leaks(options.max_examples);
  for (std::size_t i = 0; i < groups.size() && i < options.max_leak_groups; ++i) {
    const LeakGroup& g = groups[i];
    out << "  " << i + 1 << ". " << bytes_exact(g.bytes) << " in "
        << plural(g.count, "allocation", "allocations") << " " << detail::from_site(labels, g.stack) << "\n";
    out << "       api ";
    for (std::size_t k = 0; k < g.apis.size(); ++k) out << (k ? ", " : "") << g.apis[k];
    out << "; kind ";
    for (std::size_t k = 0; k < g.kinds.size(); ++k) out << (k ? ", " : "") << format::name(g.kinds[k]);
    out << "; device ";
    for (std::size_t k = 0; k < g.devices.size(); ++k) out << (k ? ", " : "") << g.devices[k];
    out << "\n       e.g. ";
    for (std::size_t k = 0; k < g.examples.size(); ++k) {
      const LeakExample& e = g.examples[k];
      out << (k ? ", " : "") << format_hex(e.ptr) << " (" << format_bytes(e.size) << " at "
          << format_seconds(e.t) << ")";
    }
    out << "\n";
    detail::write_stack(out, analysis, g.stack, options);
  }
  if (groups.size() > options.max_leak_groups) {
    out << "  ... and " << plural(groups.size() - options.max_leak_groups, "more stack", "more stacks")
        << " (see --format json)\n";
  }
}

}  // namespace

std::string render_text_report(const TraceReader& reader, const Analysis& analysis,
                               const ReportOptions& options) {
  const TraceHeader& h = reader.header();
  const ReaderStats& stats = reader.stats();
  std::ostringstream out;
  out << "cumemtrace report: " << reader.path() << "\n";
  out << "  program:   " << program_line(h) << "\n";
  // An imported snapshot has no process: pid 0 would read as a real one.
  if (h.pid != 0) {
    out << "  pid:       " << h.pid << " (parent " << h.ppid << ")";
    if (!h.host.empty()) out << " on " << h.host;
    out << "\n";
  } else if (!h.host.empty()) {
    out << "  host:      " << h.host << "\n";
  }
  out << "  pool mode: " << (h.pool.empty() ? "(not recorded)" : h.pool) << "\n";
  out << "  duration:  " << format_seconds(analysis.last_t()) << " (time of the last event)\n";
  if (stats.end) {
    out << "  ended:     " << stats.end->reason_text << ", " << stats.end->dropped << " events dropped\n";
  }
  out << "\n";

  const GrowthResult growth = analysis.growth();
  const detail::SiteLabels labels(analysis);
  detail::write_summary(out, reader, analysis, labels, growth, options);

  out << "\nTotal, all devices\n";
  write_memory(out, analysis.total());
  for (const auto& [dev, info] : analysis.devices()) {
    out << "\nDevice " << dev;
    if (info.described) out << ": " << info.name;
    if (info.described && info.total_bytes > 0) out << ", " << format_bytes(info.total_bytes);
    out << "\n";
    write_memory(out, info.memory);
  }
  detail::write_top_at_peak(out, analysis, labels, options);
  detail::write_growth(out, analysis, labels, growth, options);
  out << "\n";
  write_leaks(out, analysis, labels, options);
  detail::write_phases(out, analysis, options);
  detail::write_fragmentation(out, analysis);
  detail::write_graphs(out, analysis, labels);
  detail::write_ooms(out, reader, analysis, labels, options);
  detail::write_errors(out, analysis);

  if (stats.end && stats.end->dropped > 0) {
    out << "\nWARNING: the writer dropped " << plural(stats.end->dropped, "event", "events")
        << "; the figures above may be off.\n";
  }
  if (stats.unknown_events > 0) {
    out << "\nSkipped " << plural(stats.unknown_events, "line", "lines")
        << " with event types this analyzer does not know.\n";
  }
  if (stats.bad_lines > 0) {
    out << "\nBad lines: " << stats.bad_lines << " (skipped)\n";
    for (const BadLine& bad : stats.first_bad_lines) {
      out << "  line " << bad.line << ": " << bad.reason << "\n";
    }
    if (stats.bad_lines > stats.first_bad_lines.size()) out << "  ...\n";
  }
  if (stats.truncated) {
    out << "\nTRUNCATED: the trace was cut short after line " << stats.last_complete_line;
    if (stats.partial_last_line) out << " (the last line is incomplete)";
    else if (!stats.has_end) out << " (no end line)";
    out << "; everything before the cut is reported.\n";
  }
  return out.str();
}

}  // namespace cumemtrace::analyzer
