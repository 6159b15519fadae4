// A JSON Schema validator for exactly the subset src/grammar/json_schema.h supports (tests only):
// the oracle for the property tests. Returns "" when `v` is valid, else the first reason.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kvw::grammar {

std::string validate_json(const nlohmann::ordered_json& v, const nlohmann::ordered_json& schema,
                          const nlohmann::ordered_json& root, const std::string& path = "$");

}  // namespace kvw::grammar
