// The text report's sections (internal): the summary that answers the
// questions first, then the details.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "cumemtrace/analyzer/report.h"
#include "analyze/site_labels.h"

namespace cumemtrace::analyzer::detail {

// "1.50 MiB (1572864 bytes)"; below 1 KiB just "512 B".
std::string bytes_exact(std::uint64_t bytes);
// "1 allocation", "3 allocations"
std::string plural(std::uint64_t n, const char* one, const char* many);
// A growth leak's mean rise per iteration ("4.00 KiB"); below 10 bytes with
// decimals ("0.64 B"), so a slow leak (64 B every 100 iterations) does not
// read as 1 B. The text report and `top` both print it.
std::string per_iteration(const GrowthLeak& g);
// "3.82 MiB (4008192 bytes) at 0.000067 s in phase 'epoch 2'"
std::string peak_line(const Watermark& w, const PeakPhase& phase);
// "stack 3", or "no stack captured" for 0
std::string stack_name(std::uint64_t stack);
// "from device_alloc ← load_weights (stack 3)", or "with no stack captured"
std::string from_site(const SiteLabels& labels, std::uint64_t stack);
// A stack's frames, folded as analyze/stack_folding.h says, at most
// options.max_frames of the user's; every frame as recorded with full_stacks.
void write_frames(std::ostringstream& out, const std::vector<OwnedFrame>& frames, const ReportOptions& options);
void write_stack(std::ostringstream& out, const Analysis& analysis, std::uint64_t stack, const ReportOptions& options);

void write_summary(std::ostringstream& out, const TraceReader& reader, const Analysis& analysis,
                   const SiteLabels& labels, const GrowthResult& growth, const ReportOptions& options);
void write_top_at_peak(std::ostringstream& out, const Analysis& analysis, const SiteLabels& labels,
                       const ReportOptions& options);
void write_growth(std::ostringstream& out, const Analysis& analysis, const SiteLabels& labels,
                  const GrowthResult& growth, const ReportOptions& options);
void write_phases(std::ostringstream& out, const Analysis& analysis, const ReportOptions& options);
void write_fragmentation(std::ostringstream& out, const Analysis& analysis);
void write_ooms(std::ostringstream& out, const TraceReader& reader, const Analysis& analysis,
                const SiteLabels& labels, const ReportOptions& options);
void write_errors(std::ostringstream& out, const Analysis& analysis);

}  // namespace cumemtrace::analyzer::detail
