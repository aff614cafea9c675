#include "analyze/segment_map.h"

#include <algorithm>
#include <tuple>
#include <unordered_map>

#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "analyze/site_labels.h"

namespace cumemtrace::analyzer {

namespace {

struct SegmentRef {
  std::uint64_t ptr = 0;
  std::uint64_t size = 0;
  int dev = 0;
};

struct BlockRef {
  std::uint64_t offset = 0;  // in its segment
  std::uint64_t size = 0;
  std::uint32_t site = kOtherSite;
};

SegmentMapSite describe_site(std::uint64_t stack, const detail::SiteLabels& labels) {
  SegmentMapSite site;
  site.stack = stack;
  site.label = labels(stack);
  return site;
}

// Exact runs: contiguous blocks of one site merge. Empty if there would be
// more than `max_runs`.
std::vector<SegmentMapRun> exact_runs(const std::vector<BlockRef>& blocks, std::size_t max_runs) {
  std::vector<SegmentMapRun> runs;
  for (const BlockRef& b : blocks) {
    if (!runs.empty() && runs.back().site == b.site && runs.back().end == b.offset) {
      runs.back().end = b.offset + b.size;
      runs.back().bytes += b.size;
      ++runs.back().blocks;
      continue;
    }
    if (runs.size() == max_runs) return {};
    runs.push_back(SegmentMapRun{b.offset, b.offset + b.size, b.size, 1, b.site, false});
  }
  return runs;
}

// Too many runs to draw: cut the segment into `cells` equal slices, colour
// each by the site with the most bytes in it, and merge equal neighbours.
std::vector<SegmentMapRun> cell_runs(const std::vector<BlockRef>& blocks, std::uint64_t segment_size,
                                     std::size_t cells, std::size_t site_count) {
  const std::uint64_t cell = std::max<std::uint64_t>(1, (segment_size + cells - 1) / cells);
  const std::size_t columns = site_count + 1;  // the last one: every other site
  std::vector<std::uint64_t> bytes(cells * columns, 0);
  std::vector<std::uint64_t> block_starts(cells, 0);
  for (const BlockRef& b : blocks) {
    const std::size_t column = b.site == kOtherSite ? site_count : b.site;
    ++block_starts[std::min<std::size_t>(b.offset / cell, cells - 1)];
    for (std::uint64_t at = b.offset; at < b.offset + b.size;) {
      const std::size_t index = std::min<std::size_t>(at / cell, cells - 1);
      const std::uint64_t cell_end = index + 1 == cells ? b.offset + b.size : (index + 1) * cell;
      const std::uint64_t piece = std::min(b.offset + b.size, cell_end) - at;
      bytes[index * columns + column] += piece;
      at += piece;
    }
  }
  std::vector<SegmentMapRun> runs;
  for (std::size_t i = 0; i < cells; ++i) {
    const std::uint64_t* row = &bytes[i * columns];
    std::uint64_t total = 0;
    std::size_t best = 0;
    for (std::size_t c = 0; c < columns; ++c) {
      total += row[c];
      if (row[c] > row[best]) best = c;
    }
    if (total == 0) continue;
    const std::uint32_t site = best == site_count ? kOtherSite : static_cast<std::uint32_t>(best);
    const bool mixed = row[best] != total;
    const std::uint64_t begin = i * cell;
    const std::uint64_t end = std::min<std::uint64_t>(segment_size, (i + 1) * cell);
    if (!runs.empty() && runs.back().end == begin && runs.back().site == site && !mixed && !runs.back().mixed) {
      runs.back().end = end;
      runs.back().bytes += total;
      runs.back().blocks += block_starts[i];
      continue;
    }
    runs.push_back(SegmentMapRun{begin, end, total, block_starts[i], site, mixed});
  }
  return runs;
}

}  // namespace

void SegmentMapCollector::consume(const TraceEvent& e, const Analysis& analysis) {
  using format::Event;
  switch (e.ev) {
    case Event::segment_alloc: segments_.insert(e.ptr, Segment{e.size, e.dev}); break;
    case Event::segment_free: segments_.erase(e.ptr); break;
    case Event::alloc:
      if (!peak_taken_ && options_.peak_allocated > 0 &&
          analysis.total().allocated.current == options_.peak_allocated) {
        peak_taken_ = true;
        take(SegmentSnapshot::Moment::peak, e.t, std::nullopt, analysis);
      }
      break;
    case Event::oom:
      if (ooms_seen_ < options_.max_ooms) take(SegmentSnapshot::Moment::oom, e.t, e.dev, analysis);
      ++ooms_seen_;
      break;
    default: break;
  }
}

bool SegmentMapCollector::done(std::uint64_t ooms_expected) const {
  const bool peak_done = peak_taken_ || options_.peak_allocated == 0;
  return peak_done && ooms_seen_ >= std::min<std::uint64_t>(ooms_expected, options_.max_ooms);
}

void SegmentMapCollector::take(SegmentSnapshot::Moment moment, std::uint64_t t, std::optional<int> dev,
                               const Analysis& analysis) {
  SegmentSnapshot snap;
  snap.moment = moment;
  snap.t = t;
  snap.dev = dev;
  snap.oom_index = ooms_seen_;

  std::vector<SegmentRef> segments;
  segments_.for_each([&](std::uint64_t ptr, const Segment& s) {
    if (!dev || s.dev == *dev) segments.push_back(SegmentRef{ptr, s.size, s.dev});
  });
  auto by_place = [](const SegmentRef& a, const SegmentRef& b) { return std::tie(a.dev, a.ptr) < std::tie(b.dev, b.ptr); };
  std::sort(segments.begin(), segments.end(), by_place);
  for (const SegmentRef& s : segments) snap.reserved += s.size;

  // Blocks into their segments, by address containment; bytes per call site.
  struct Placed {
    std::size_t segment;
    std::uint64_t offset, size, stack;
  };
  std::vector<Placed> placed;
  std::unordered_map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> by_stack;  // bytes, count
  analysis.live().for_each([&](std::uint64_t ptr, const LiveAllocation& a) {
    if (dev && a.dev != *dev) return;
    snap.allocated += a.size;
    auto& [bytes, count] = by_stack[a.stack];
    bytes += a.size;
    ++count;
    const SegmentRef probe{ptr, 0, a.dev};
    auto it = std::upper_bound(segments.begin(), segments.end(), probe, by_place);
    if (it == segments.begin() || std::prev(it)->dev != a.dev || ptr - std::prev(it)->ptr >= std::prev(it)->size) {
      ++snap.outside_blocks;
      snap.outside_bytes += a.size;
      return;
    }
    const std::size_t index = static_cast<std::size_t>(std::prev(it) - segments.begin());
    const std::uint64_t offset = ptr - segments[index].ptr;
    placed.push_back(Placed{index, offset, std::min(a.size, segments[index].size - offset), a.stack});
  });

  // The sites with the most bytes get colours; ties go to the lower stack id, so maps are reproducible.
  std::vector<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>> ranked;  // bytes, count, stack
  ranked.reserve(by_stack.size());
  for (const auto& [stack, figures] : by_stack) ranked.emplace_back(figures.first, figures.second, stack);
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return std::get<0>(a) != std::get<0>(b) ? std::get<0>(a) > std::get<0>(b) : std::get<2>(a) < std::get<2>(b);
  });
  std::unordered_map<std::uint64_t, std::uint32_t> site_of_stack;
  // Labels among the sites seen so far; the page prefers the report's own
  // labels (over the whole trace) where it has them.
  const detail::SiteLabels labels(analysis);
  for (const auto& [bytes, count, stack] : ranked) {
    if (snap.sites.size() < options_.max_sites) {
      site_of_stack[stack] = static_cast<std::uint32_t>(snap.sites.size());
      SegmentMapSite site = describe_site(stack, labels);
      site.bytes = bytes;
      site.count = count;
      snap.sites.push_back(std::move(site));
    } else {
      snap.other_site_bytes += bytes;
      ++snap.other_site_count;
    }
  }

  // The largest segments are drawn when there are too many.
  std::vector<std::size_t> shown(segments.size());
  for (std::size_t i = 0; i < shown.size(); ++i) shown[i] = i;
  if (shown.size() > options_.max_segments) {
    std::stable_sort(shown.begin(), shown.end(),
                     [&](std::size_t a, std::size_t b) { return segments[a].size > segments[b].size; });
    for (std::size_t i = options_.max_segments; i < shown.size(); ++i) {
      ++snap.hidden_segments;
      snap.hidden_segment_bytes += segments[shown[i]].size;
    }
    shown.resize(options_.max_segments);
    std::sort(shown.begin(), shown.end());
  }
  std::vector<std::size_t> row_of_segment(segments.size(), SIZE_MAX);
  for (std::size_t row = 0; row < shown.size(); ++row) row_of_segment[shown[row]] = row;

  std::vector<std::vector<BlockRef>> blocks(shown.size());
  snap.segments.resize(shown.size());
  for (std::size_t row = 0; row < shown.size(); ++row) {
    const SegmentRef& s = segments[shown[row]];
    snap.segments[row].ptr = s.ptr;
    snap.segments[row].size = s.size;
    snap.segments[row].dev = s.dev;
  }
  for (const Placed& p : placed) {
    const std::size_t row = row_of_segment[p.segment];
    if (row == SIZE_MAX) continue;
    auto site = site_of_stack.find(p.stack);
    blocks[row].push_back(BlockRef{p.offset, p.size, site == site_of_stack.end() ? kOtherSite : site->second});
    snap.segments[row].used += p.size;
    ++snap.segments[row].blocks;
  }
  for (std::size_t row = 0; row < shown.size(); ++row) {
    std::vector<BlockRef>& list = blocks[row];
    std::sort(list.begin(), list.end(), [](const BlockRef& a, const BlockRef& b) { return a.offset < b.offset; });
    SegmentMapSegment& segment = snap.segments[row];
    segment.runs = exact_runs(list, options_.max_runs);
    if (segment.runs.empty() && !list.empty()) {
      segment.runs = cell_runs(list, segment.size, options_.max_runs, snap.sites.size());
    }
  }
  snapshots_.push_back(std::move(snap));
}

std::vector<SegmentSnapshot> collect_segment_maps(const std::string& path, const SegmentMapOptions& options,
                                                  std::uint64_t ooms_expected) {
  SegmentMapCollector collector(options);
  if (collector.done(ooms_expected)) return {};
  TraceReader reader(path);
  Analysis analysis;
  while (const TraceEvent* e = reader.next()) {
    analysis.consume(*e);
    collector.consume(*e, analysis);
    if (collector.done(ooms_expected)) break;  // nothing later is needed
  }
  return std::move(collector.snapshots());
}

}  // namespace cumemtrace::analyzer
