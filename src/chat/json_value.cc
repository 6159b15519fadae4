#include "chat/json_value.h"

namespace kvw {

jinja::Value value_from_json(const nlohmann::ordered_json& j) {
  using jinja::Value;
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::integer((int64_t)j.get<uint64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      jinja::ValueList items;
      items.reserve(j.size());
      for (const auto& v : j) items.push_back(value_from_json(v));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::ValueDict d;
      for (const auto& [k, v] : j.items()) d.items.emplace_back(k, value_from_json(v));
      return Value::dict(std::move(d));
    }
    default:
      return Value::none();
  }
}

}  // namespace kvw
