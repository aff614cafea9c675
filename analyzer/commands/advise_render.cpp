// The advice as text (the `advise` command's output and a section of
// `report`) and as JSON (`advise --format json`, and `report`'s "advice",
// which its HTML page renders).
#include <cstdio>

#include "commands/advise.h"
#include "cumemtrace/analyzer/units.h"

namespace cumemtrace::analyzer {

namespace {

using Json = nlohmann::ordered_json;

std::string pad(std::string s, std::size_t width, bool right) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

const char* kind_name(AdviceCandidate::Kind k) {
  switch (k) {
    case AdviceCandidate::Kind::torch: return "pytorch";
    case AdviceCandidate::Kind::torch_tensors: return "cumemtrace_torch_tensors";
    case AdviceCandidate::Kind::per_allocation: return "per_allocation";
    case AdviceCandidate::Kind::cumemtrace_pool: return "cumemtrace_pool";
  }
  return "";
}

const char* verdict_name(Advice::Verdict v) {
  switch (v) {
    case Advice::Verdict::keep: return "keep";
    case Advice::Verdict::save: return "save";
    case Advice::Verdict::avoid_oom: return "avoid_oom";
    case Advice::Verdict::needs_capacity: return "needs_capacity";
    case Advice::Verdict::cannot_replay: return "cannot_replay";
  }
  return "";
}

std::string capacity_text(const Advice& a) {
  std::size_t same = a.capacities.empty() ? 0 : a.capacities.front();
  for (std::size_t c : a.capacities) {
    if (c != same) return "each device's capacity";
  }
  return same == 0 ? "an unknown capacity" : format_bytes(same);
}

// The recommendation's explanation: what it saves or why nothing does.
std::string verdict_text(const Advice& a) {
  const CandidateOutcome& base = a.outcomes.front();
  const std::string base_label = candidate_label(base.candidate);
  switch (a.verdict) {
    case Advice::Verdict::keep:
      return "Keep " + (base.candidate.as_run ? "the run's setting (" + base_label + ")" : base_label) +
             ": peak reserved " + format_bytes(base.peak_reserved) + " = " +
             format_fixed(ratio_of(base.peak_reserved, base.peak_allocated), 3) +
             "x peak allocated; no setting tried saves 1% of it or more.";
    case Advice::Verdict::save: {
      const CandidateOutcome& r = a.outcomes[*a.recommended];
      const std::size_t saved = base.peak_reserved - r.peak_reserved;
      std::string text = "It saves " + format_bytes(saved) + " of peak reserved memory (" +
                         format_fixed(100.0 * ratio_of(saved, base.peak_reserved), 1) + "%): " + format_bytes(r.peak_reserved) +
                         " (" + format_fixed(ratio_of(r.peak_reserved, r.peak_allocated), 3) + "x peak allocated) instead of " +
                         format_bytes(base.peak_reserved) + " (" + format_fixed(ratio_of(base.peak_reserved, base.peak_allocated), 3) +
                         "x)";
      if (r.min.found && base.min.found && r.min.capacity < base.min.capacity) {
        text += "; it fits on a " + format_bytes(r.min.capacity) + " device instead of " + format_bytes(base.min.capacity);
      }
      return text + ".";
    }
    case Advice::Verdict::avoid_oom: {
      const CandidateOutcome& r = a.outcomes[*a.recommended];
      std::string failed;
      if (!a.run_ooms.empty()) {
        failed = ", the " + format_bytes(a.run_ooms.front().size) + " request that failed at " +
                 format_seconds(a.run_ooms.front().t) + " included";
      }
      std::string text = "It avoids the out-of-memory failure: on the same " + capacity_text(a) +
                         " it serves every request" + failed + " (peak reserved " + format_bytes(r.peak_reserved) +
                         ", " + format_fixed(ratio_of(r.peak_reserved, r.peak_allocated), 3) + "x peak allocated).";
      return text;
    }
    case Advice::Verdict::needs_capacity: {
      std::size_t demand = 0;
      for (const CandidateOutcome& o : a.outcomes) demand = std::max(demand, o.min.peak_demand);
      std::size_t capacity = 0;
      for (std::size_t c : a.capacities) capacity = std::max(capacity, c);
      std::string text;
      if (demand > capacity) {
        text = "No setting avoids it: this is capacity, not fragmentation. The program needs " + format_bytes(demand) +
               " at once (the failed request included), more than the " + format_bytes(capacity) +
               " its allocator had.";
      } else {
        text = "No setting tried fits it in " + format_bytes(capacity) + ", although the program needs " +
               format_bytes(demand) + " at once: every one of them loses the difference to fragmentation.";
      }
      if (a.recommended) {
        const CandidateOutcome& r = a.outcomes[*a.recommended];
        text += " The smallest device that runs it is " + format_bytes(a.needed_capacity) + " (" +
                format_bytes(a.needed_capacity > capacity ? a.needed_capacity - capacity : 0) + " more), with " +
                candidate_label(r.candidate) + ".";
      }
      return text;
    }
    case Advice::Verdict::cannot_replay: return a.not_replayable;
  }
  return {};
}

std::string recommendation_line(const Advice& a) {
  if (!a.recommended) return {};
  const AdviceCandidate& c = a.outcomes[*a.recommended].candidate;
  if (a.verdict == Advice::Verdict::needs_capacity) {
    return "a device of at least " + format_bytes(a.needed_capacity) +
           (c.as_run ? std::string() : ", and " + paste_line(c, a.command));
  }
  return paste_line(c, a.command);
}

}  // namespace

std::string render_advice_text(const Advice& a) {
  std::string out = "Allocator advice (each setting replayed through this trace's allocations)\n";
  if (a.replayable != Replayable::yes) {
    out += "  Not replayed. " + a.not_replayable + "\n";
    if (!a.instead.empty()) out += "  Instead: " + a.instead + "\n";
    return out;
  }
  if (!a.caveat.empty()) out += "  Note: " + a.caveat + "\n";
  if (!a.run_setting_note.empty()) out += "  Note: " + a.run_setting_note + "\n";
  for (std::size_t i = 0; i < a.devices.size(); ++i) {
    out += "  device " + std::to_string(a.devices[i]) + ": capacity " +
           (a.capacities[i] == 0 ? std::string("unknown") : format_bytes(a.capacities[i])) + "\n";
  }
  out += "  capacity: " + a.capacity_source + "\n";
  const bool on_device = !a.outcomes.empty() && a.outcomes.front().failures_on_device.has_value();
  out += std::string("  peak reserved: ") + (on_device ? "on that device" : "on a device without limit") +
         "; smallest device: the least memory on which the setting serves every request\n";
  if (!a.run_ooms.empty()) {
    const ReplayOom& first = a.run_ooms.front();
    out += "  the run failed " + std::to_string(a.run_ooms.size()) +
           (a.run_ooms.size() == 1 ? " time" : " times") + " for lack of memory; first: " + format_bytes(first.size) +
           " requested at " + format_seconds(first.t) + " on device " + std::to_string(first.dev) + "\n";
  }
  std::size_t width = 7;
  for (const CandidateOutcome& o : a.outcomes) width = std::max(width, candidate_label(o.candidate).size());
  out += "\n  " + pad("setting", width, false) + "  " + pad("peak reserved", 14, true) + "  " +
         pad("x allocated", 11, true) + "  " + pad("fails on device", 15, true) + "  " +
         pad("smallest device", 15, true) + "\n";
  for (std::size_t i = 0; i < a.outcomes.size(); ++i) {
    const CandidateOutcome& o = a.outcomes[i];
    const std::string fails = o.failures_on_device ? std::to_string(*o.failures_on_device) : "-";
    const std::string min = o.min.found ? format_bytes(o.min.capacity) : "none found";
    out += (a.recommended == i && a.verdict != Advice::Verdict::keep ? "* " : "  ") +
           pad(candidate_label(o.candidate), width, false) + "  " + pad(format_bytes(o.peak_reserved), 14, true) +
           "  " + pad(format_fixed(ratio_of(o.peak_reserved, o.peak_allocated), 3), 11, true) + "  " + pad(fails, 15, true) +
           "  " + pad(min, 15, true) + "\n";
  }
  out += "\n";
  if (a.verdict == Advice::Verdict::keep) {
    out += "  " + verdict_text(a) + "\n";
  } else {
    out += "  Recommendation: " + recommendation_line(a) + "\n";
    out += "  " + verdict_text(a) + "\n";
  }
  return out;
}

Json advice_json(const Advice& a) {
  Json j;
  j["replayable"] = a.replayable == Replayable::yes ? "yes" : a.replayable == Replayable::segments ? "segments" : "empty";
  j["verdict"] = verdict_name(a.verdict);
  if (a.replayable != Replayable::yes) {
    j["why"] = a.not_replayable;
    j["instead"] = a.instead.empty() ? Json(nullptr) : Json(a.instead);
    return j;
  }
  j["flavor"] = a.flavor == AdviceFlavor::torch ? "pytorch" : "program";
  j["caveat"] = a.caveat.empty() ? Json(nullptr) : Json(a.caveat);
  j["run_setting_note"] = a.run_setting_note.empty() ? Json(nullptr) : Json(a.run_setting_note);
  j["allocations"] = a.allocations;
  Json devices = Json::array();
  for (std::size_t i = 0; i < a.devices.size(); ++i) {
    devices.push_back({{"dev", a.devices[i]},
                       {"capacity", a.capacities[i] == 0 ? Json(nullptr) : Json(a.capacities[i])}});
  }
  j["devices"] = devices;
  j["capacity_source"] = a.capacity_source;
  Json ooms = Json::array();
  for (const ReplayOom& o : a.run_ooms) ooms.push_back({{"t", o.t}, {"dev", o.dev}, {"size", o.size}});
  j["run_ooms"] = ooms;
  Json rows = Json::array();
  for (const CandidateOutcome& o : a.outcomes) {
    Json r;
    r["setting"] = candidate_label(o.candidate);
    r["kind"] = kind_name(o.candidate.kind);
    r["value"] = o.candidate.setting;
    r["as_run"] = o.candidate.as_run;
    r["peak_reserved"] = o.peak_reserved;
    r["peak_reserved_unlimited"] = o.peak_reserved_unlimited;
    r["peak_allocated"] = o.peak_allocated;
    r["reserved_over_allocated"] = round4(ratio_of(o.peak_reserved, o.peak_allocated));
    r["failures_on_device"] = o.failures_on_device ? Json(*o.failures_on_device) : Json(nullptr);
    r["min_capacity"] = o.min.found ? Json(o.min.capacity) : Json(nullptr);
    r["peak_demand"] = o.min.peak_demand;
    r["replays"] = o.replays;
    rows.push_back(std::move(r));
  }
  j["candidates"] = rows;
  j["recommended"] = a.recommended ? Json(*a.recommended) : Json(nullptr);
  j["recommendation"] = a.verdict == Advice::Verdict::keep ? Json(nullptr) : Json(recommendation_line(a));
  j["explanation"] = verdict_text(a);
  if (a.verdict == Advice::Verdict::needs_capacity) j["needed_capacity"] = a.needed_capacity;
  return j;
}

}  // namespace cumemtrace::analyzer
