// libFuzzer target for everything that reads untrusted trace bytes: the
// reader (plain and zstd, long lines, cut files), the analysis and both
// reports on whatever it yields, check and diff on that report, and the line
// decoder's batch mode, which must give exactly what line-by-line decoding
// gives (a difference is reported as a crash).
//
// Built by scripts/fuzz.sh with clang: -fsanitize=fuzzer,address,undefined.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/check.h"
#include "cumemtrace/analyzer/diff.h"
#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "../support/event_digest.h"
#include "read/line_parser.h"

namespace {

using namespace cumemtrace::analyzer;

void read_whole_trace(const std::string& path, ReaderOptions options) {
  try {
    TraceReader reader(path, options);
    Analysis analysis;
    while (const TraceEvent* event = reader.next()) analysis.consume(*event);
    const nlohmann::ordered_json report = render_json_report(reader, analysis);
    (void)report.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    (void)render_text_report(reader, analysis);
    (void)evaluate_checks(report, parse_check_list("peak<=1GiB,leaked==0,leaks<3,growth<=1,fragmentation<=0.5,ooms==0"),
                          Suppressions::parse("*a*\nmain\n"));
    (void)render_diff_text(diff_reports(report, report, "a", "b"));
  } catch (const TraceError&) {
    // A file that is not a trace, or corrupt compression: a clean refusal.
  }
}

[[noreturn]] void mismatch(std::string_view line, const std::string& batch, const std::string& single) {
  std::fprintf(stderr, "batch and line-by-line decoding differ on line '%.*s':\n  batch:  %s\n  single: %s\n",
               static_cast<int>(line.size()), line.data(), batch.c_str(), single.c_str());
  std::abort();
}

// Batch decoding of every complete line (with line shapes: most lines then
// skip simdjson) against decoding each line alone, with and without shapes.
void compare_batch_with_single_lines(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t last_newline = input.rfind('\n');
  if (last_newline == std::string_view::npos) return;
  const std::string block(input.substr(0, last_newline + 1));
  const std::string padded = block + std::string(detail::LineParser::kPadding, '\0');
  detail::LineParser batch_parser;
  detail::LineParser single_parser(/*use_shapes=*/false);
  detail::LineParser shaped_single_parser;
  batch_parser.start_batch(std::string_view(padded.data(), block.size()));
  std::string_view line;
  TraceEvent batch_event;
  TraceEvent shaped_event;  // one for all lines, as the reader keeps one
  detail::ParseResult result;
  std::size_t start = 0;
  while (batch_parser.next_in_batch(line, batch_event, result)) {
    const std::size_t end = block.find('\n', start);
    const std::string alone = block.substr(start, end - start) + std::string(detail::LineParser::kPadding, '\0');
    start = end + 1;
    if (line != std::string_view(alone.data(), alone.size() - detail::LineParser::kPadding)) {
      mismatch(line, "a different line", std::string(alone.data(), alone.size() - detail::LineParser::kPadding));
    }
    const std::string batch_digest = cumemtrace::test::event_digest(result, batch_event);
    const std::string_view alone_line(alone.data(), alone.size() - detail::LineParser::kPadding);
    TraceEvent single_event;  // fresh for every line: nothing left from earlier lines
    const detail::ParseResult single = single_parser.parse(alone_line, single_event);
    const std::string single_digest = cumemtrace::test::event_digest(single, single_event);
    if (batch_digest != single_digest) mismatch(line, batch_digest, single_digest);
    const detail::ParseResult shaped = shaped_single_parser.parse(alone_line, shaped_event);
    const std::string shaped_digest = cumemtrace::test::event_digest(shaped, shaped_event);
    if (shaped_digest != single_digest) mismatch(line, shaped_digest, single_digest);
  }
  if (start != block.size()) mismatch("(end of batch)", "stopped early", "more lines");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fd = ::memfd_create("trace", MFD_CLOEXEC);
  if (fd < 0) return 0;
  for (std::size_t written = 0; written < size;) {
    const ssize_t n = ::write(fd, data + written, size - written);
    if (n <= 0) break;
    written += static_cast<std::size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  read_whole_trace(path, ReaderOptions{});
  ReaderOptions tight;  // the long-line and buffer-growth paths, on small inputs
  tight.max_line_bytes = 80;
  tight.max_recorded_bad_lines = 2;
  read_whole_trace(path, tight);
  ::close(fd);
  compare_batch_with_single_lines(data, size);
  return 0;
}
