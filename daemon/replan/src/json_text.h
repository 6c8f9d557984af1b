#pragma once
/// \file json_text.h
/// \brief A string field of a planner document, or a fallback.
///
/// nlohmann's `j.value("key", "")` returns the fallback only when the key is absent: a key
/// present as null throws `type_error`, which on the planner's thread terminates reftd. The
/// planner's documents do carry nulls ("policy" of a decision that needs none, a rerouted
/// stage's node), so every optional string is read through this.

#include <string>

#include <nlohmann/json.hpp>

namespace reft::replan {

inline std::string TextOr(const nlohmann::json& j, const char* key, const std::string& fallback = "") {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

}  // namespace reft::replan
