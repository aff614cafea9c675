// Running programs under cumemtrace on the simulated device, and reading
// what they leave behind, for the integration tests. Processes, scratch
// directories and files come from tests/support.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_support.h"

namespace cumemtrace::testing {

// The environment that puts a program on the simulated device (a 16 GiB
// device unless `more` says otherwise: its entries replace the defaults).
EnvChanges sim_environment(const EnvChanges& more = {});

// Each line of a JSON Lines file, parsed independently of cumemtrace's own
// reader (so a bug shared by our writer and reader cannot hide).
std::vector<nlohmann::json> read_json_lines(const std::string& path);

// The same one line at a time, for traces too large to hold parsed: `each`
// gets the 1-based line number and the parsed line.
void for_each_json_line(const std::string& path,
                        const std::function<void(std::size_t, const nlohmann::json&)>& each);

// Waits for a started program, killing it (and failing the test) if it
// takes longer than `seconds`: a hang (at exit, in a deadlock) is one of the
// bugs the tests look for.
CommandResult wait_at_most(const RunningCommand& running, int seconds);

// Starts `argv` with `env` and waits for it, at most `seconds` (wait_at_most).
CommandResult run_at_most(const std::vector<std::string>& argv, const EnvChanges& env, int seconds = 60);

// Waits (at most 30 s, else fails the test) until a started program has
// printed the line "ready" on stdout.
void wait_for_ready(const RunningCommand& running);

// The lines of `text`, without their line breaks.
std::vector<std::string> lines_of(const std::string& text);

// Turns core files off for this process and the programs it starts (those
// that fault or abort on purpose); false if it could not.
bool no_core_files();

// The test programs' folder (tests/apps in the build tree): every target
// that compiles integration_support.cpp defines CUMEMTRACE_APPS_DIR. Here
// and not in each test file, which a unity build compiles together
// (cmake/BuildSpeed.cmake).
inline const std::string kApps = CUMEMTRACE_APPS_DIR;

// Core files off from the start, for every test of the executable (the
// programs that fault or abort on purpose would otherwise leave one each);
// a test that needs it asserts it.
inline const bool kNoCores = no_core_files();

// The lines of a parsed trace whose "ev" is `ev`.
std::vector<nlohmann::json> lines_of(const std::vector<nlohmann::json>& trace, const std::string& ev);

}  // namespace cumemtrace::testing
