#include "apps/kvwarden/rope_flags.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <nlohmann/json.hpp>

namespace kvw::app {
namespace {

// vLLM's --rope-scaling JSON: rope_type (or the older "type"), factor,
// original_max_position_embeddings; other keys (beta_fast, ...) are refused rather than
// silently ignored, since they would change the numerics.
Status apply_json(const std::string& text, RopeOverride& o) {
  const char* flag = "--rope-scaling";
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Error{std::string(flag) + ": not a JSON object: " + text};
  for (const auto& [key, value] : j.items()) {
    if (key == "rope_type" || key == "type") {
      if (!value.is_string())
        return Error{std::string(flag) + ": \"" + key + "\" must be a string"};
      // vLLM calls plain RoPE "default".
      const std::string type = value.get<std::string>();
      auto s = parse_rope_scaling(type == "default" ? "none" : type);
      if (!s.ok()) return Error{std::string(flag) + ": " + s.message()};
      o.scaling = *s;
    } else if (key == "factor") {
      if (!value.is_number() || value.get<double>() <= 0)
        return Error{std::string(flag) + ": \"factor\" must be a number > 0"};
      o.scale_factor = value.get<float>();
    } else if (key == "rope_theta") {
      if (!value.is_number() || value.get<double>() <= 0)
        return Error{std::string(flag) + ": \"rope_theta\" must be a number > 0"};
      o.freq_base = value.get<float>();
    } else if (key == "original_max_position_embeddings") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1)
        return Error{std::string(flag) +
                     ": \"original_max_position_embeddings\" must be an integer >= 1"};
      o.orig_ctx = value.get<int32_t>();
    } else {
      return Error{std::string(flag) + ": unsupported key \"" + key +
                   "\" (supported: rope_type, factor, original_max_position_embeddings, "
                   "rope_theta)"};
    }
  }
  if (!o.scaling) return Error{std::string(flag) + ": the JSON form needs \"rope_type\""};
  return Status();
}

}  // namespace

void add_rope_flags(CLI::App* cmd, RopeFlags* f) {
  cmd->add_option("--rope-scaling", f->scaling,
                  "Override the file's RoPE scaling: none, linear, ntk, yarn, or vLLM's JSON "
                  "('{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":"
                  "32768}')");
  cmd->add_option("--rope-scale", f->scale, "Override the RoPE context extension factor")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--rope-freq-base,--rope-theta", f->freq_base, "Override the RoPE frequency base")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--yarn-orig-ctx", f->orig_ctx,
                  "Override the original context length that YaRN / linear scaling extend")
      ->check(CLI::PositiveNumber);
}

Result<RopeOverride> rope_override(const RopeFlags& f) {
  RopeOverride o;
  if (!f.scaling.empty() && f.scaling.front() == '{') {
    KVW_RETURN_IF_ERROR(apply_json(f.scaling, o));
  } else if (!f.scaling.empty()) {
    auto s = parse_rope_scaling(f.scaling);
    if (!s.ok()) return Error{"--rope-scaling: " + s.message()};
    o.scaling = *s;
  }
  // The plain flags win over the JSON's values, as the more specific spelling.
  if (f.scale > 0) o.scale_factor = f.scale;
  if (f.freq_base > 0) o.freq_base = f.freq_base;
  if (f.orig_ctx > 0) o.orig_ctx = f.orig_ctx;
  return o;
}

int64_t scaled_context(int64_t trained, const RopeOverride& o) {
  if (!o.scaling || *o.scaling == RopeScaling::kNone || !o.scale_factor) return trained;
  const int64_t base = o.orig_ctx ? *o.orig_ctx : trained;
  return (int64_t)std::llround((double)base * *o.scale_factor);
}

std::string rope_parameters_json(int64_t trained, const RopeOverride& o) {
  if (!o.scaling && !o.freq_base) return "";
  nlohmann::json j = nlohmann::json::object();
  if (o.scaling) {
    j["rope_type"] = *o.scaling == RopeScaling::kNone ? "default" : rope_scaling_name(*o.scaling);
    if (o.scale_factor) j["factor"] = *o.scale_factor;
    j["original_max_position_embeddings"] = o.orig_ctx ? (int64_t)*o.orig_ctx : trained;
  }
  if (o.freq_base) j["rope_theta"] = *o.freq_base;
  return j.dump();
}

}  // namespace kvw::app
