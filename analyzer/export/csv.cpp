// `cumemtrace export --format csv`: one row per event, for pandas and DuckDB.
#include <array>
#include <ostream>
#include <string_view>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/export.h"
#include "export/text_builders.h"

namespace cumemtrace::analyzer {

namespace {

using detail::append_csv_field;
using detail::append_hex;
using detail::append_int;
using detail::append_uint;

enum Column : std::size_t {
  kT, kEv, kDev, kTid, kPtr, kSize, kBlock, kApi, kKind, kStream, kStack, kFunction, kName,
  kCause, kWhat, kAllocated, kReserved, kCachedFree, kLargestFree, kDeviceFree, kDeviceTotal,
  kFreeBlocks, kInactiveSplit, kPython, kColumnCount
};

constexpr std::array<std::string_view, kColumnCount> kHeader{
    "t", "ev", "dev", "tid", "ptr", "size", "block", "api", "kind", "stream", "stack", "function",
    "name", "cause", "what", "allocated", "reserved", "cached_free", "largest_free", "device_free",
    "device_total", "free_blocks", "inactive_split", "python"};

// Builds one row: cells are set in column order, the ones not set stay empty.
class Row {
 public:
  explicit Row(std::string& out) : out_(out) {}
  std::string& cell(Column c) {
    while (next_ <= c) {
      if (next_ > 0) out_ += ',';
      ++next_;
    }
    return out_;
  }
  void uint(Column c, std::uint64_t v) { append_uint(cell(c), v); }
  void text(Column c, std::string_view v) { append_csv_field(cell(c), v); }
  void hex(Column c, std::uint64_t v) { append_hex(cell(c), v); }
  void end() {
    cell(static_cast<Column>(kColumnCount - 1));
    out_ += '\n';
  }

 private:
  std::string& out_;
  std::size_t next_ = 0;
};

bool has_csv_row(format::Event ev) {
  using format::Event;
  switch (ev) {
    case Event::alloc:
    case Event::free:
    case Event::segment_alloc:
    case Event::segment_free:
    case Event::oom:
    case Event::pool:
    case Event::mark:
    case Event::error: return true;
    default: return false;
  }
}

void write_row(const TraceEvent& e, const StackTable& stacks, std::string& out) {
  using format::Event;
  Row row(out);
  row.uint(kT, e.t);
  row.text(kEv, format::name(e.ev));
  const bool has_dev = e.ev != Event::mark && e.ev != Event::error;
  if (has_dev) append_int(row.cell(kDev), e.dev);
  const bool has_tid = e.ev == Event::alloc || e.ev == Event::free || e.ev == Event::oom ||
                       e.ev == Event::mark || e.ev == Event::error;
  if (has_tid) row.uint(kTid, e.tid);
  const bool has_ptr = e.ev == Event::alloc || e.ev == Event::free || e.ev == Event::segment_alloc ||
                       e.ev == Event::segment_free || e.ev == Event::error;
  if (has_ptr) row.hex(kPtr, e.ptr);
  if (e.ev != Event::mark && e.ev != Event::error && e.ev != Event::pool) row.uint(kSize, e.size);
  if (e.block) row.uint(kBlock, *e.block);
  if (!e.api.empty()) row.text(kApi, e.api);
  if (e.ev == Event::alloc || e.ev == Event::free || e.ev == Event::mark) row.text(kKind, e.kind);
  if (e.stream) row.hex(kStream, *e.stream);
  const bool has_stack = e.ev == Event::alloc || e.ev == Event::free || e.ev == Event::oom ||
                         e.ev == Event::error;
  if (has_stack) {
    row.uint(kStack, e.stack);
    if (e.stack != 0) row.text(kFunction, detail::innermost_function(stacks.find(e.stack)));
  }
  if (e.ev == Event::mark) row.text(kName, e.name);
  if (e.ev == Event::oom) row.text(kCause, e.cause);
  if (e.ev == Event::error) row.text(kWhat, e.what);
  if (e.ev == Event::oom || e.ev == Event::pool) {
    row.uint(kAllocated, e.allocated);
    row.uint(kReserved, e.reserved);
    row.uint(kCachedFree, e.cached_free);
    row.uint(kLargestFree, e.largest_free);
  }
  if (e.ev == Event::oom) {
    row.uint(kDeviceFree, e.device_free);
    row.uint(kDeviceTotal, e.device_total);
  }
  if (e.ev == Event::pool) {
    row.uint(kFreeBlocks, e.free_blocks);
    row.uint(kInactiveSplit, e.inactive_split);
  }
  // Last, as columns are only added at the end.
  if (has_stack && e.stack != 0) {
    const std::string python = detail::innermost_python_frame(stacks.find(e.stack));
    if (!python.empty()) row.text(kPython, python);
  }
  row.end();
}

}  // namespace

ExportSummary export_events_csv(TraceReader& reader, std::ostream& out) {
  detail::ChunkedOutput output(out);
  for (std::size_t i = 0; i < kHeader.size(); ++i) {
    if (i > 0) output.text += ',';
    output.text += kHeader[i];
  }
  output.text += '\n';
  ExportSummary summary;
  StackTable stacks;
  while (const TraceEvent* e = reader.next()) {
    if (e->ev == format::Event::stack) {
      stacks.add(*e);
      continue;
    }
    if (!has_csv_row(e->ev)) continue;
    write_row(*e, stacks, output.text);
    ++summary.records;
    output.maybe_flush();
  }
  output.flush();
  return summary;
}

}  // namespace cumemtrace::analyzer
