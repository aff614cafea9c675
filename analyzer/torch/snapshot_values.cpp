#include "torch/snapshot_values.h"

#include <utility>

namespace cumemtrace::analyzer::snapshot {

using pickle::Type;
using pickle::Value;

std::optional<Action> parse_action(std::string_view s) {
  static constexpr std::pair<std::string_view, Action> kActions[] = {
      {"alloc", Action::alloc},
      {"free_requested", Action::free_requested},
      {"free_completed", Action::free_completed},
      {"segment_alloc", Action::segment_alloc},
      {"segment_free", Action::segment_free},
      {"segment_map", Action::segment_map},
      {"segment_unmap", Action::segment_unmap},
      {"snapshot", Action::snapshot},
      {"oom", Action::oom},
  };
  for (const auto& [name, action] : kActions) {
    if (name == s) return action;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> as_u64(const std::optional<Value>& v) {
  if (!v) return std::nullopt;
  const std::optional<std::int64_t> i = v->as_int();
  if (!i || *i < 0) return std::nullopt;
  return static_cast<std::uint64_t>(*i);
}

Json to_json(const Value& v, int depth, std::size_t& budget) {
  if (budget == 0 || depth > 6) return "...";
  --budget;
  switch (v.type()) {
    case Type::none: return nullptr;
    case Type::boolean: return *v.as_bool();
    case Type::integer: return *v.as_int();
    case Type::floating: return *v.as_float();
    case Type::string: return std::string(*v.as_string());
    case Type::bytes: return "<" + std::to_string(v.as_bytes()->size()) + " bytes>";
    case Type::list:
    case Type::tuple: {
      Json list = Json::array();
      for (std::size_t i = 0; i < v.size() && budget > 0; ++i) list.push_back(to_json(v.item(i), depth + 1, budget));
      return list;
    }
    case Type::dict: {
      Json object = Json::object();
      for (std::size_t i = 0; i < v.size() && budget > 0; ++i) {
        const Value key = v.key(i);
        std::string name = key.as_string() ? std::string(*key.as_string()) : to_json(key, depth + 1, budget).dump();
        object[name] = to_json(v.value(i), depth + 1, budget);
      }
      return object;
    }
  }
  return nullptr;
}

void emit(const Json& line, std::string& out) {
  // Frame names are whatever Python pickled; keep the line valid UTF-8.
  out += line.dump(-1, ' ', false, Json::error_handler_t::replace);
  out += '\n';
}

}  // namespace cumemtrace::analyzer::snapshot
