// Real PyTorch snapshots (CUMEMTRACE_TORCH_SNAPSHOTS) through
// import-torch -> export --format torch-snapshot -> import-torch: the text
// report of the trace imported the second time is the first one's, line for
// line, but for its first two lines, which name the files (the trace's path,
// and the snapshot it came from: the original pickle, then ours). The header's
// allocator_settings come back too (what `advise` reads to replay the run's
// own setting).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cumemtrace/analyzer/analysis.h"
#include "cumemtrace/analyzer/export.h"
#include "cumemtrace/analyzer/report.h"
#include "cumemtrace/analyzer/trace_reader.h"
#include "test_support.h"
#include "torch/pickle_reader.h"
#include "torch/snapshot_import.h"

namespace cumemtrace::analyzer {
namespace {

namespace fs = std::filesystem;

struct Imported {
  std::string trace;   // its path
  std::string report;  // the text report without its first two lines
  std::string allocator_settings;
};

Imported import_and_report(const pickle::Document& doc, const std::string& source, const std::string& trace) {
  std::string text;
  const TorchImportStats stats = import_torch_snapshot(doc.root(), TorchImportOptions{source}, text);
  EXPECT_EQ(stats.inconsistencies, 0u) << stats.first_inconsistency;
  cumemtrace::testing::write_file(trace, text);
  TraceReader reader(trace);
  Analysis analysis;
  while (const TraceEvent* e = reader.next()) analysis.consume(*e);
  Imported out{trace, render_text_report(reader, analysis), ""};
  for (int i = 0; i < 2; ++i) out.report.erase(0, out.report.find('\n') + 1);
  const auto config = nlohmann::json::parse(reader.header().config_json);
  out.allocator_settings = config.value("allocator_settings", nlohmann::json()).dump();
  return out;
}

TEST(TorchSnapshots, ExportedSnapshotsImportToTheSameReport) {
  const fs::path dir = CUMEMTRACE_TORCH_SNAPSHOTS;
  if (!fs::exists(dir / "SOURCES.md")) {
    GTEST_SKIP() << "no snapshots in " << dir << " (set -DCUMEMTRACE_TORCH_SNAPSHOTS=DIR)";
  }
  cumemtrace::testing::TempDir scratch;
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".pickle") continue;
    const std::string name = entry.path().stem();
    SCOPED_TRACE(name);
    const Imported first =
        import_and_report(pickle::Document::load_file(entry.path()), entry.path(), scratch / (name + ".1.jsonl"));

    TraceReader reader(first.trace);
    std::ostringstream pickled;
    const TorchSnapshotSummary summary = export_torch_snapshot(reader, pickled);
    EXPECT_EQ(summary.own_segments, 0u) << "every block of a snapshot is in one of its segments";
    EXPECT_EQ(summary.unknown_frees + summary.unknown_segment_frees, 0u);
    const Imported second =
        import_and_report(pickle::Document::parse(pickled.str()), "export", scratch / (name + ".2.jsonl"));

    EXPECT_EQ(first.report, second.report);
    EXPECT_EQ(first.allocator_settings, second.allocator_settings);
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

}  // namespace
}  // namespace cumemtrace::analyzer
