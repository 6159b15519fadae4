#include "kv_events/kv_events_config.h"

#include <nlohmann/json.hpp>

namespace kvw::kv_events {
namespace {

constexpr std::string_view kFlag = "--kv-events-config";

Error key_error(const std::string& key, const std::string& want) {
  return Error{std::string(kFlag) + ": \"" + key + "\" must be " + want};
}

}  // namespace

Status KvEventsConfig::validate() const {
  if (publisher != "zmq" && publisher != "null") {
    return Error{std::string(kFlag) + ": unknown publisher \"" + publisher + "\" (zmq or null)"};
  }
  if (!publishes()) return Status::ok_status();
  if (endpoint.empty()) return Error{std::string(kFlag) + ": \"endpoint\" is empty"};
  if (buffer_steps == 0) return Error{std::string(kFlag) + ": \"buffer_steps\" must be >= 1"};
  if (max_queue_size == 0) return Error{std::string(kFlag) + ": \"max_queue_size\" must be >= 1"};
  if (hwm < 0) return Error{std::string(kFlag) + ": \"hwm\" must be >= 0"};
  return Status::ok_status();
}

Result<KvEventsConfig> parse_kv_events_config(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Error{std::string(kFlag) + ": not a JSON object: " + std::string(json)};
  }
  KvEventsConfig c;
  if (!j.contains("publisher") && j.value("enable_kv_cache_events", false) == true) {
    c.publisher = "zmq";
  }
  for (const auto& [key, v] : j.items()) {
    if (key == "enable_kv_cache_events") {
      if (!v.is_boolean()) return key_error(key, "true or false");
      c.enable_kv_cache_events = v.get<bool>();
    } else if (key == "publisher" || key == "endpoint" || key == "topic") {
      if (!v.is_string()) return key_error(key, "a string");
      (key == "publisher"  ? c.publisher
       : key == "endpoint" ? c.endpoint
                           : c.topic) = v.get<std::string>();
    } else if (key == "replay_endpoint") {
      if (v.is_null()) {
        c.replay_endpoint.reset();
      } else if (v.is_string()) {
        c.replay_endpoint = v.get<std::string>();
      } else {
        return key_error(key, "a string or null");
      }
    } else if (key == "buffer_steps" || key == "hwm" || key == "max_queue_size") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t{1} << 31)) {
        return key_error(key, "an integer in 0..2^31");
      }
      const int64_t n = v.get<int64_t>();
      if (key == "buffer_steps") c.buffer_steps = size_t(n);
      if (key == "hwm") c.hwm = int(n);
      if (key == "max_queue_size") c.max_queue_size = size_t(n);
    } else {
      return Error{std::string(kFlag) + ": unknown key \"" + key + "\""};
    }
  }
  KVW_RETURN_IF_ERROR(c.validate());
  return c;
}

}  // namespace kvw::kv_events
