// The probes of the facts the simulated device rests on (tests/apps/
// sim_page_probe.cpp, sim_driver_probe.cpp): each fact is a value measured
// on the device beside the sim's value. On the sim a difference fails the
// program; on a real GPU it is reported, and the program ends with
// `differences from the sim: N` for scripts/gpu-check.sh to judge.
#pragma once

#include <cstdio>
#include <string>

#include "sim_test.h"

namespace simtest {

class Probe {
 public:
  // Known once the device is asked its name.
  void set_on_sim(bool on_sim) { on_sim_ = on_sim; }

  void fact(const char* what, const std::string& value, const std::string& sim_value) {
    if (value == sim_value) {
      std::printf("%s: %s\n", what, value.c_str());
      return;
    }
    if (on_sim_) SIM_FAIL("%s: %s, but the sim says %s", what, value.c_str(), sim_value.c_str());
    ++differences_;
    std::printf("%s: %s (sim: %s)\n", what, value.c_str(), sim_value.c_str());
  }

  // The last line, which scripts/gpu-check.sh reads.
  int finish() const {
    std::printf("differences from the sim: %d\n", differences_);
    return 0;
  }

 private:
  bool on_sim_ = false;
  int differences_ = 0;
};

// Bytes as MiB with two decimals, as the probes print them.
inline std::string mib_text(double bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f MiB", bytes / (1 << 20));
  return text;
}

}  // namespace simtest
