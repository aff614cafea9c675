// Segment maps: which segments (memory the pool reserved from the driver)
// were live at a chosen moment, and which call sites' blocks sat where inside
// them. The HTML report draws one at the allocated peak and one at each OOM.
//
// Taken on a second read of the trace, with a fresh Analysis alongside for
// the live blocks: a map is a copy of the live set at one moment, and the
// first read does not know yet which moments matter. A block belongs to the
// segment whose address range contains it (same device); blocks in no
// segment (managed or host memory, or a trace without segment events) are
// counted apart. Each map is reduced as it is taken to at most
// `max_segments` rows of at most `max_runs` runs, so its size does not depend
// on how many blocks were live.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cumemtrace/address_map.h"
#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/trace_event.h"

namespace cumemtrace::analyzer {

inline constexpr std::uint32_t kOtherSite = 0xFFFFFFFF;

struct SegmentMapSite {
  std::uint64_t stack = 0;
  std::string label;                   // the call site's label (site_labels.h)
  std::uint64_t bytes = 0;
  std::uint64_t count = 0;
};

// Neighbouring blocks of one site, drawn as one bar. In a crowded segment a
// run is a slice of the segment shown in the colour of the site with the
// most bytes in it.
struct SegmentMapRun {
  std::uint64_t begin = 0;  // offset in the segment
  std::uint64_t end = 0;
  std::uint64_t bytes = 0;  // bytes of live blocks in [begin, end)
  std::uint64_t blocks = 0;
  std::uint32_t site = kOtherSite;  // index in SegmentSnapshot::sites
  bool mixed = false;               // other sites have blocks in this range too
};

struct SegmentMapSegment {
  std::uint64_t ptr = 0;
  std::uint64_t size = 0;
  int dev = 0;
  std::uint64_t used = 0;  // bytes of the live blocks inside
  std::uint64_t blocks = 0;
  std::vector<SegmentMapRun> runs;
};

struct SegmentSnapshot {
  enum class Moment { peak, oom };
  Moment moment = Moment::peak;
  std::uint64_t t = 0;
  std::optional<int> dev;     // the OOM's device; every device at the peak
  std::size_t oom_index = 0;  // 0-based, for an OOM map
  std::uint64_t allocated = 0;  // live block bytes in scope
  std::uint64_t reserved = 0;   // live segment bytes in scope
  std::vector<SegmentMapSegment> segments;  // drawn: by device, then address
  std::uint64_t hidden_segments = 0;        // not drawn (the smallest, past max_segments)
  std::uint64_t hidden_segment_bytes = 0;
  std::uint64_t outside_blocks = 0;  // live blocks in no segment
  std::uint64_t outside_bytes = 0;
  std::vector<SegmentMapSite> sites;  // coloured sites, most bytes first
  std::uint64_t other_site_bytes = 0;  // the sites not coloured
  std::uint64_t other_site_count = 0;  // how many such sites
};

struct SegmentMapOptions {
  std::uint64_t peak_allocated = 0;  // map the moment the total first reaches this; 0: no peak map
  std::size_t max_ooms = 8;          // OOM maps; later OOMs are not mapped
  std::size_t max_segments = 48;
  std::size_t max_runs = 400;
  std::size_t max_sites = 10;
};

class SegmentMapCollector {
 public:
  explicit SegmentMapCollector(SegmentMapOptions options) : options_(options) {}

  // Call right after analysis.consume(event), with the same event.
  void consume(const TraceEvent& event, const Analysis& analysis);

  // True once the peak map and `ooms_expected` OOM maps (at most max_ooms) are taken.
  bool done(std::uint64_t ooms_expected) const;

  std::vector<SegmentSnapshot>& snapshots() { return snapshots_; }

 private:
  struct Segment {
    std::uint64_t size = 0;
    int dev = 0;
  };
  void take(SegmentSnapshot::Moment moment, std::uint64_t t, std::optional<int> dev, const Analysis& analysis);

  SegmentMapOptions options_;
  AddressMap<Segment> segments_;
  std::vector<SegmentSnapshot> snapshots_;
  bool peak_taken_ = false;
  std::size_t ooms_seen_ = 0;
};

// Reads the trace at `path` again, as far as needed, for the maps at the
// allocated peak and at the first OOMs. Throws TraceError as TraceReader does.
std::vector<SegmentSnapshot> collect_segment_maps(const std::string& path, const SegmentMapOptions& options,
                                                  std::uint64_t ooms_expected);

}  // namespace cumemtrace::analyzer
