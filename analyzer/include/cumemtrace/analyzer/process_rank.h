// Which rank of a distributed job a trace came from: recorded in its header
// (`rank_env`, README.md "Additions to the trace format"), else guessed from
// its file name or command line. `report`, `check` and `diff` name a trace
// by it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace cumemtrace::analyzer {

// A rank written in decimal: digits only, at most 9 of them.
std::optional<std::int64_t> parse_rank_number(std::string_view digits);

// Rank from the header's `rank_env` object (as the JSON report's
// `program.rank_env` holds it): RANK, else the launchers' own global ranks
// (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID: one of these is set when
// RANK is not, and under torchrun in a Slurm job SLURM_PROCID numbers nodes,
// not processes), else LOCAL_RANK, as `%r` takes it. nullopt when none of
// them is a number.
std::optional<std::int64_t> rank_from_rank_env(const nlohmann::ordered_json& rank_env);

// Rank from a trace file name written with `%r` next to the word "rank":
// "job.rank3.jsonl", "rank-3", "rank_3", "RANK3" (the last such number).
std::optional<std::int64_t> rank_from_file_name(std::string_view path);

// Rank from a command line: --rank N, --rank=N, else --local-rank/--local_rank.
std::optional<std::int64_t> rank_from_argv(const std::vector<std::string>& argv);

// The rank of one trace from its JSON report: its header's, else its file
// name's, else its command line's.
std::optional<std::int64_t> rank_of_report(const nlohmann::ordered_json& report);

// "run.4242.jsonl, rank 3", or the file name alone when no rank is known:
// how check's and diff's verdicts name a trace.
std::string trace_with_rank(const std::string& trace, std::optional<std::int64_t> rank);

}  // namespace cumemtrace::analyzer
