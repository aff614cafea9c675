#include "route_check.h"

#include <set>
#include <sstream>

namespace cumemtrace::testing {

using nlohmann::json;

namespace {

json memory_line(const char* ev, const json& m) {
  json line = {{"ev", ev},          {"api", m["api"]},   {"kind", m["kind"]},
               {"dev", m["dev"]},   {"ptr", m["ptr"]},   {"size", m["size"]}};
  if (m.contains("stream")) line["stream"] = m["stream"];
  if (m.contains("tid")) line["tid"] = m["tid"];
  return line;
}

json segment_line(const char* ev, const json& m, bool with_api) {
  json line = {{"ev", ev}, {"dev", m["dev"]}, {"ptr", m["ptr"]}, {"size", m["size"]}};
  if (with_api) line["api"] = m.contains("api") ? m["api"] : json("cuMemMap");
  return line;
}

std::string dump(const std::vector<json>& lines) {
  std::string s;
  for (const auto& l : lines) s += "  " + l.dump() + "\n";
  return s;
}

bool is_memory_event(const json& line) {
  static const std::set<std::string> kinds = {"alloc", "free", "segment_alloc", "segment_free",
                                               "error", "oom"};
  return kinds.count(line.value("ev", "")) != 0;
}

}  // namespace

std::vector<json> expected_events(const std::vector<json>& manifest) {
  std::vector<json> out;
  for (const json& m : manifest) {
    const std::string ev = m["ev"];
    const bool vmm = m.value("kind", "") == "vmm";
    if (ev == "alloc") {
      if (!vmm) out.push_back(segment_line("segment_alloc", m, true));
      out.push_back(memory_line("alloc", m));
    } else if (ev == "free") {
      out.push_back(memory_line("free", m));
      if (!vmm) out.push_back(segment_line("segment_free", m, false));
    } else if (ev == "error") {
      out.push_back({{"ev", "error"}, {"api", m["api"]}, {"ptr", m["ptr"]}, {"what", m["what"]}});
    } else if (ev == "map") {
      out.push_back(segment_line("segment_alloc", m, true));
    } else if (ev == "unmap") {
      out.push_back(segment_line("segment_free", m, false));
    }
  }
  return out;
}

std::vector<json> memory_events(const std::vector<json>& trace) {
  std::vector<json> out;
  for (const json& line : trace) {
    if (is_memory_event(line)) out.push_back(line);
  }
  return out;
}

std::string compare_events(const std::vector<json>& expected, const std::vector<json>& actual) {
  std::ostringstream why;
  const std::size_t n = std::min(expected.size(), actual.size());
  for (std::size_t i = 0; i < n && why.tellp() == 0; ++i) {
    const json& want = expected[i];
    const json& got = actual[i];
    for (const auto& [key, value] : want.items()) {
      if (!got.contains(key) || got[key] != value) {
        why << "line " << i << ": " << key << " is " << (got.contains(key) ? got[key].dump() : "missing")
            << ", expected " << value.dump();
        break;
      }
    }
    if (why.tellp() != 0) break;
    const std::string ev = want["ev"];
    if ((ev == "alloc" || ev == "free") && got.contains("stream") != want.contains("stream")) {
      why << "line " << i << ": stream " << (got.contains("stream") ? "present" : "missing");
    } else if ((ev == "alloc" || ev == "free" || ev == "error") &&
               (!got.contains("stack") || !got["stack"].is_number_unsigned() ||
                got.value("tid", 0) <= 0)) {
      why << "line " << i << ": stack/tid " << got.dump();
    }
  }
  if (why.tellp() == 0 && expected.size() != actual.size()) {
    why << expected.size() << " events expected, " << actual.size() << " written";
  }
  if (why.tellp() == 0) return {};
  why << "\nexpected:\n" << dump(expected) << "written:\n" << dump(actual);
  return why.str();
}

std::map<long, std::string> compare_events_per_thread(const std::vector<json>& manifest,
                                                      const std::vector<json>& trace) {
  std::map<long, std::vector<json>> expected_by_thread, written_by_thread;
  for (const json& e : expected_events(manifest)) {
    if (e["ev"] == "alloc" || e["ev"] == "free") expected_by_thread[e["tid"].get<long>()].push_back(e);
  }
  for (const json& e : memory_events(trace)) {
    if (e["ev"] == "alloc" || e["ev"] == "free") written_by_thread[e["tid"].get<long>()].push_back(e);
  }
  std::map<long, std::string> differences;
  for (const auto& [tid, expected] : expected_by_thread) {
    differences[tid] = compare_events(expected, written_by_thread[tid]);
  }
  for (const auto& [tid, written] : written_by_thread) {
    if (!differences.contains(tid)) differences[tid] = compare_events({}, written);
  }
  return differences;
}

std::string check_trace_frame(const std::vector<json>& trace, const std::vector<json>& manifest) {
  std::ostringstream why;
  if (trace.size() < 2 || trace.front()["ev"] != "header" || trace.back()["ev"] != "end") {
    return "a trace starts with header and ends with end";
  }
  std::uint64_t last_t = 0;
  std::set<int> described;
  std::set<std::uint64_t> stacks;  // ids of `stack` lines seen so far
  for (std::size_t i = 1; i < trace.size(); ++i) {
    const json& line = trace[i];
    if (line["ev"] == "stack") stacks.insert(line["id"].get<std::uint64_t>());
    if (line["ev"] != "stack" && line.contains("stack") && line["stack"] != 0 &&
        !stacks.count(line["stack"].get<std::uint64_t>())) {
      why << "line " << i << ": stack " << line["stack"] << " used before its stack line\n";
    }
    const auto t = line["t"].get<std::uint64_t>();
    if (t < last_t) why << "line " << i << ": t goes back (" << t << " < " << last_t << ")\n";
    last_t = t;
    if (line["ev"] == "device") described.insert(line["dev"].get<int>());
    if (line.contains("dev") && line["ev"] != "device" && !described.count(line["dev"].get<int>())) {
      why << "line " << i << ": device " << line["dev"] << " used before its device line\n";
    }
  }
  std::map<std::string, std::uint64_t> live;  // ptr (with kind vmm apart) → size
  for (const json& m : manifest) {
    const std::string key = m.value("kind", "") + ":" + m.value("ptr", "");
    if (m["ev"] == "alloc") live[key] = m["size"].get<std::uint64_t>();
    if (m["ev"] == "free") live.erase(key);
  }
  std::uint64_t live_bytes = 0;
  for (const auto& [key, size] : live) live_bytes += size;
  const json& end = trace.back();
  if (end["reason"] != "exit" || end["dropped"] != 0 || end["live"] != live.size() ||
      end["live_bytes"] != live_bytes) {
    why << "end is " << end.dump() << ", expected live " << live.size() << " (" << live_bytes
        << " bytes) and nothing dropped\n";
  }
  return why.str();
}

std::string check_address_order(const std::vector<json>& trace) {
  std::ostringstream why;
  std::set<std::string> live;
  for (std::size_t i = 0; i < trace.size(); ++i) {
    const json& line = trace[i];
    if (line["ev"] != "alloc" && line["ev"] != "free") continue;
    if (line["kind"] == "vmm") continue;  // handles, not addresses
    const std::string ptr = line["ptr"];
    if (line["ev"] == "alloc" && !live.insert(ptr).second) {
      why << "line " << i << ": " << ptr << " allocated again before its free\n";
    } else if (line["ev"] == "free" && live.erase(ptr) == 0) {
      why << "line " << i << ": " << ptr << " freed but not allocated\n";
    }
  }
  return why.str();
}

std::map<std::string, std::string> resolved_modules(const std::vector<json>& manifest) {
  std::map<std::string, std::string> modules;
  for (const json& m : manifest) {
    if (m["ev"] == "resolve") modules[m["name"]] = m["module"];
  }
  return modules;
}

}  // namespace cumemtrace::testing
