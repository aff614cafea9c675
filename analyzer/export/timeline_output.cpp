// `cumemtrace timeline` as CSV or JSON (EXPORT_FORMATS.md), written as the
// trace is read when it is not resampled.
#include <map>
#include <ostream>
#include <type_traits>

#include "cumemtrace/analyzer/timeline.h"
#include "export/text_builders.h"

namespace cumemtrace::analyzer {

namespace {

using detail::append_csv_field;
using detail::append_json_string;
using detail::append_uint;
using detail::ChunkedOutput;

// t,event,dev,allocated,reserved,kind,name,size,cause
// The device's graph memory is its own series: a `graph` row (its `reserved`
// the graph memory reserved) after each sample where it changed, so the
// columns, and traces without CUDA graphs, stay as they were.
class CsvTimelineWriter final : public TimelineSink {
 public:
  explicit CsvTimelineWriter(std::ostream& out) : out_(out) {
    out_.text += "t,event,dev,allocated,reserved,kind,name,size,cause\n";
  }

  void sample(const TimelineSample& s) override {
    std::string& o = out_.text;
    append_uint(o, s.t);
    o += ",sample,";
    detail::append_int(o, s.dev);
    o += ',';
    append_uint(o, s.allocated);
    o += ',';
    append_uint(o, s.reserved);
    o += ",,,,\n";
    ++samples;
    if (s.graph_reserved) graph_row(s.t, s.dev, *s.graph_reserved);
    out_.maybe_flush();
  }

  void mark(const TimelineMark& m) override {
    std::string& o = out_.text;
    append_uint(o, m.t);
    o += ",mark,,,,";
    append_csv_field(o, m.kind);
    o += ',';
    append_csv_field(o, m.name);
    o += ",,\n";
    out_.maybe_flush();
  }

  void oom(const TimelineOom& x) override {
    std::string& o = out_.text;
    append_uint(o, x.t);
    o += ",oom,";
    detail::append_int(o, x.dev);
    o += ',';
    append_uint(o, x.allocated);
    o += ',';
    append_uint(o, x.reserved);
    o += ",,,";
    append_uint(o, x.size);
    o += ',';
    append_csv_field(o, x.cause);
    o += '\n';
    out_.maybe_flush();
  }

  std::uint64_t samples = 0;

 private:
  void graph_row(std::uint64_t t, int dev, std::uint64_t graph_reserved) {
    auto [it, first] = graph_reserved_.try_emplace(dev, graph_reserved);
    if (!first && it->second == graph_reserved) return;
    it->second = graph_reserved;
    std::string& o = out_.text;
    append_uint(o, t);
    o += ",graph,";
    detail::append_int(o, dev);
    o += ",,";
    append_uint(o, graph_reserved);
    o += ",,,,\n";
  }

  ChunkedOutput out_;
  std::map<int, std::uint64_t> graph_reserved_;  // per device, as last written
};

// {"timeline_version":1,...,"samples":[...],"marks":[...],"ooms":[...],...}
// Samples stream out as they come; marks and OOMs (kept by the collector,
// up to its limits) follow at the end, so this sink ignores them.
class JsonTimelineWriter final : public TimelineSink {
 public:
  JsonTimelineWriter(std::ostream& out, const std::string& trace, std::size_t buckets) : out_(out) {
    std::string& o = out_.text;
    o += "{\"timeline_version\":1,\"trace\":";
    append_json_string(o, trace);
    o += ",\"points\":";
    if (buckets == 0) {
      o += "null";
    } else {
      append_uint(o, buckets);
    }
    o += ",\n\"samples\":[";
  }

  void sample(const TimelineSample& s) override {
    std::string& o = out_.text;
    o += samples == 0 ? "\n" : ",\n";
    o += "{\"t\":";
    append_uint(o, s.t);
    o += ",\"dev\":";
    detail::append_int(o, s.dev);
    o += ",\"allocated\":";
    append_uint(o, s.allocated);
    o += ",\"reserved\":";
    append_uint(o, s.reserved);
    if (s.graph_reserved) {
      o += ",\"graph_reserved\":";
      append_uint(o, *s.graph_reserved);
    }
    o += '}';
    ++samples;
    out_.maybe_flush();
  }

  void finish(const TimelineCollector& c, const ReaderStats& stats) {
    std::string& o = out_.text;
    o += "],\n\"marks\":[";
    bool first = true;
    for (const TimelineMark& m : c.marks()) {
      o += first ? "\n" : ",\n";
      first = false;
      o += "{\"t\":";
      append_uint(o, m.t);
      o += ",\"tid\":";
      append_uint(o, m.tid);
      o += ",\"kind\":";
      append_json_string(o, m.kind);
      o += ",\"name\":";
      append_json_string(o, m.name);
      o += '}';
      out_.maybe_flush();
    }
    o += "],\n\"marks_omitted\":";
    append_uint(o, c.marks_omitted());
    o += ",\n\"ooms\":[";
    first = true;
    for (const TimelineOom& x : c.ooms()) {
      o += first ? "\n" : ",\n";
      first = false;
      o += "{\"t\":";
      append_uint(o, x.t);
      o += ",\"dev\":";
      detail::append_int(o, x.dev);
      o += ",\"api\":";
      append_json_string(o, x.api);
      o += ",\"size\":";
      append_uint(o, x.size);
      o += ",\"cause\":";
      append_json_string(o, x.cause);
      o += ",\"allocated\":";
      append_uint(o, x.allocated);
      o += ",\"reserved\":";
      append_uint(o, x.reserved);
      o += ",\"stack\":";
      append_uint(o, x.stack);
      o += '}';
    }
    o += "],\n\"ooms_omitted\":";
    append_uint(o, c.ooms_omitted());
    o += ",\n\"devices\":[";
    first = true;
    for (int dev : c.devices()) {
      if (!first) o += ',';
      first = false;
      detail::append_int(o, dev);
    }
    o += "],\n\"bucket_ns\":";
    if (c.options().buckets == 0) {
      o += "null";
    } else {
      append_uint(o, c.bucket_ns());
    }
    o += ",\n\"t_end\":";
    append_uint(o, c.last_t());
    o += ",\n\"truncated\":";
    o += stats.truncated ? "true" : "false";
    o += "}\n";
  }

  std::uint64_t samples = 0;

 private:
  ChunkedOutput out_;
};

template <typename Writer>
TimelineWriteSummary run_timeline(TraceReader& reader, std::size_t buckets, Writer& writer) {
  Analysis analysis;
  TimelineCollector collector(TimelineOptions{.buckets = buckets}, buckets == 0 ? &writer : nullptr);
  while (const TraceEvent* e = reader.next()) {
    analysis.consume(*e);
    collector.consume(*e, analysis);
  }
  if (buckets != 0) collector.replay(writer);
  if constexpr (std::is_same_v<Writer, JsonTimelineWriter>) writer.finish(collector, reader.stats());
  return TimelineWriteSummary{writer.samples, collector.marks_omitted(), collector.ooms_omitted()};
}

}  // namespace

TimelineWriteSummary write_timeline(TraceReader& reader, TimelineFormat format, std::size_t buckets,
                                    std::ostream& out) {
  if (format == TimelineFormat::csv) {
    CsvTimelineWriter writer(out);
    return run_timeline(reader, buckets, writer);
  }
  JsonTimelineWriter writer(out, reader.path(), buckets);
  return run_timeline(reader, buckets, writer);
}

}  // namespace cumemtrace::analyzer
