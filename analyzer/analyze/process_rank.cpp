#include "cumemtrace/analyzer/process_rank.h"

#include <algorithm>
#include <cctype>

#include "analyze/report_figures.h"

namespace cumemtrace::analyzer {

namespace {
using Json = nlohmann::ordered_json;
constexpr std::size_t kMaxRankDigits = 9;
}  // namespace

std::optional<std::int64_t> parse_rank_number(std::string_view digits) {
  if (digits.empty() || digits.size() > kMaxRankDigits) return std::nullopt;
  std::int64_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

std::optional<std::int64_t> rank_from_rank_env(const Json& rank_env) {
  if (!rank_env.is_object()) return std::nullopt;
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "LOCAL_RANK"}) {
    const auto it = rank_env.find(name);
    if (it == rank_env.end() || !it->is_string()) continue;
    if (auto rank = parse_rank_number(it->get_ref<const std::string&>())) return rank;
  }
  return std::nullopt;
}

std::optional<std::int64_t> rank_from_file_name(std::string_view path) {
  std::string name(detail::base_name(path));
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  std::optional<std::int64_t> rank;
  for (std::size_t at = name.find("rank"); at != std::string::npos; at = name.find("rank", at + 1)) {
    std::size_t i = at + 4;
    if (i < name.size() && (name[i] == '-' || name[i] == '_' || name[i] == '.' || name[i] == '=')) ++i;
    std::size_t j = i;
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    if (auto n = parse_rank_number(std::string_view(name).substr(i, j - i))) rank = n;
  }
  return rank;
}

std::optional<std::int64_t> rank_from_argv(const std::vector<std::string>& argv) {
  auto find = [&](std::initializer_list<std::string_view> flags) -> std::optional<std::int64_t> {
    for (std::size_t i = 0; i < argv.size(); ++i) {
      const std::string_view arg = argv[i];
      for (std::string_view flag : flags) {
        if (arg == flag && i + 1 < argv.size()) return parse_rank_number(argv[i + 1]);
        if (arg.size() > flag.size() && arg.starts_with(flag) && arg[flag.size()] == '=') {
          return parse_rank_number(arg.substr(flag.size() + 1));
        }
      }
    }
    return std::nullopt;
  };
  if (auto rank = find({"--rank", "--global-rank", "--global_rank"})) return rank;
  return find({"--local-rank", "--local_rank"});
}

std::optional<std::int64_t> rank_of_report(const Json& report) {
  const auto program = report.find("program");
  const bool has_program = program != report.end() && program->is_object();
  if (has_program) {
    if (const auto env = program->find("rank_env"); env != program->end()) {
      if (auto rank = rank_from_rank_env(*env)) return rank;
    }
  }
  if (const auto trace = report.find("trace"); trace != report.end() && trace->is_string()) {
    if (auto rank = rank_from_file_name(trace->get_ref<const std::string&>())) return rank;
  }
  if (has_program) {
    if (const auto argv = program->find("argv"); argv != program->end() && argv->is_array()) {
      std::vector<std::string> args;
      for (const Json& a : *argv) {
        if (a.is_string()) args.push_back(a.get<std::string>());
      }
      return rank_from_argv(args);
    }
  }
  return std::nullopt;
}

std::string trace_with_rank(const std::string& trace, std::optional<std::int64_t> rank) {
  return rank ? trace + ", rank " + std::to_string(*rank) : trace;
}

}  // namespace cumemtrace::analyzer
