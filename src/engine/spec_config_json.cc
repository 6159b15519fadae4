// vLLM's --speculative-config JSON, mapped onto SpecConfig: prompt lookup ("ngram") or a draft
// model ("model": FILE).
#include <algorithm>
#include <nlohmann/json.hpp>

#include "engine/engine_config.h"

namespace kvw {

Result<SpecConfig> parse_speculative_config(std::string_view text, SpecConfig base) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string flag = "--speculative-config: ";
  if (!j.is_object())
    return Error{flag + "expected a JSON object, got '" + std::string(text) + "'"};
  for (const auto& [key, value] : j.items()) {
    if (key == "method" || key == "model") {
      if (!value.is_string()) return Error{flag + key + " must be a string"};
      const std::string v = value.get<std::string>();
      // vLLM also spells prompt lookup as model "[ngram]"; any other model is a draft model's
      // file, and "draft_model" the method that goes with it.
      if (key == "model" && v != "ngram" && v != "[ngram]") {
        if (v.empty()) return Error{flag + "model must name a GGUF file"};
        base.draft_model = v;
      } else if (key == "method" && v != "ngram" && v != "[ngram]" && v != "draft_model") {
        return Error{flag + "method '" + v +
                     "': supported are \"ngram\" (prompt lookup) and \"draft_model\" (with "
                     "\"model\": a GGUF file)"};
      }
    } else if (key == "num_speculative_tokens" || key == "prompt_lookup_max" ||
               key == "prompt_lookup_min") {
      if (!value.is_number_integer()) return Error{flag + key + " must be an integer"};
      const int32_t v = value.get<int32_t>();
      if (key == "num_speculative_tokens") base.num_speculative_tokens = v;
      if (key == "prompt_lookup_max") base.prompt_lookup_max = v;
      if (key == "prompt_lookup_min") base.prompt_lookup_min = v;
    } else {
      return Error{flag + "unknown key '" + key +
                   "' (known: method, num_speculative_tokens, prompt_lookup_max, "
                   "prompt_lookup_min)"};
    }
  }
  if (!j.contains("method") && !j.contains("model")) {
    return Error{flag + "give \"method\": \"ngram\" or \"model\": a draft model's GGUF file"};
  }
  if (j.value("method", std::string()) == "draft_model" && base.draft_model.empty()) {
    return Error{flag + "method \"draft_model\" needs \"model\": a GGUF file"};
  }
  if (j.value("method", std::string()) == "ngram") base.draft_model.clear();
  // Only max given: match from it down to min(max, our default min), as vLLM's default min
  // does not exceed max.
  if (j.contains("prompt_lookup_max") && !j.contains("prompt_lookup_min")) {
    base.prompt_lookup_min = std::min(base.prompt_lookup_min, base.prompt_lookup_max);
  }
  base.enabled = true;
  if (Status st = base.validate(); !st.ok()) return Error{flag + st.message()};
  return base;
}

}  // namespace kvw
