// The live view of `cumemtrace top` and `run --live` (internal): the figures
// of a trace read so far, and the text of one frame of the view, without any
// terminal I/O (cli/live_view.cpp draws it), so each frame is unit-tested
// from fixed figures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "analyze/site_labels.h"
#include "cumemtrace/analyzer/analysis.h"

namespace cumemtrace::analyzer::detail {

struct LiveDevice {
  int dev = 0;
  std::string name;  // empty: the trace did not describe it
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
  std::uint64_t peak_allocated = 0;
  std::uint64_t peak_reserved = 0;
  std::vector<std::uint64_t> history;  // allocated at each frame, oldest first (the sparkline)
};

struct LiveSite {
  std::string label;  // as the report labels it (site_labels.h)
  std::uint64_t bytes = 0;
  std::uint64_t count = 0;
};

struct LiveGrowth {
  std::string label;
  std::string per_iteration;  // "4.00 KiB"
  std::uint64_t iterations = 0;
};

struct LiveFigures {
  // Set by the caller: what is followed and how it stands.
  std::string program;  // "train (pid 4242)"; empty before the header
  std::string trace;    // the path
  std::string state;    // "following", "waiting for ...", "ended (exit)", "writer gone"
  std::uint64_t events = 0;
  std::uint64_t events_per_second = 0;
  std::uint64_t bad_lines = 0;

  // From the analysis (LiveSampler::sample).
  std::uint64_t t_ns = 0;  // the last event's time since the start
  std::vector<LiveDevice> devices;
  LiveDevice total;  // every device together (dev -1); its own row only with several devices
  std::size_t live_sites = 0;  // sites with bytes live now
  std::vector<LiveSite> top_sites;
  std::string iterations;  // "12 iterations, mark 'step #'"; empty: none recognised yet
  std::vector<LiveGrowth> growth;
  std::uint64_t ooms = 0;
  std::string last_oom;  // "1.00 GiB on device 0 (capacity) from f ← g"
  std::uint64_t errors = 0;
  std::vector<std::pair<std::string, std::uint64_t>> errors_by_what;
};

// Takes the figures from an analysis at each frame, keeping what the view
// needs between frames: the sparklines' samples and the sites' labels,
// which are worked out again only when new stacks or sites appeared.
class LiveSampler {
 public:
  explicit LiveSampler(std::size_t history = 240) : history_(history) {}
  // Fills `figures`' analysis part and adds a sample to each sparkline.
  void sample(const Analysis& analysis, std::size_t top_sites, LiveFigures& figures);

 private:
  std::size_t history_;
  std::map<int, std::deque<std::uint64_t>> samples_;
  std::optional<SiteLabels> labels_;
  std::size_t labelled_sites_ = 0, labelled_stacks_ = 0, labelled_ooms_ = 0;
};

// `values` as Unicode block characters (U+2581..U+2588), scaled to their
// maximum, one character per value, the last `width` values only; a zero
// is a space.
std::string sparkline(const std::vector<std::uint64_t>& values, std::size_t width);

// The frame's lines, each at most `width` columns (one column per code
// point), at most `height` of them: what does not fit goes, call sites first.
std::vector<std::string> live_frame(const LiveFigures& figures, std::size_t width, std::size_t height);

// One line of the same figures, for a log (no terminal).
std::string live_line(const LiveFigures& figures);

}  // namespace cumemtrace::analyzer::detail
