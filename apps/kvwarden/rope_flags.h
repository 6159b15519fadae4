// apps/kvwarden/rope_flags.h: llama-server's overrides of a file's RoPE metadata
// (--rope-scaling, --rope-scale, --rope-freq-base, --yarn-orig-ctx) for every command that loads
// or plans a model, so a 32k model can run at 128k with YaRN. --rope-scaling also takes vLLM's
// JSON form, {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768}.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/model.h"

namespace CLI {
class App;
}

namespace kvw::app {

struct RopeFlags {
  std::string scaling;  // none|linear|ntk|yarn, or vLLM's JSON object
  float scale = 0;      // 0: the file's
  float freq_base = 0;  // 0: the file's
  int32_t orig_ctx = 0;
};

void add_rope_flags(CLI::App* cmd, RopeFlags* f);
// Errors name the flag.
Result<RopeOverride> rope_override(const RopeFlags& f);
// The positions a model covers under the override: its original context (--yarn-orig-ctx, else
// `trained`) times the factor, when the override names linear, NTK or YaRN scaling with a
// factor; else `trained`. Sizes the default --max-model-len of serve and plan.
int64_t scaled_context(int64_t trained, const RopeOverride& o);
// The override as vLLM's rope_parameters JSON (rope_type, factor,
// original_max_position_embeddings, rope_theta), for plan's launch lines; "" without one.
std::string rope_parameters_json(int64_t trained, const RopeOverride& o);

}  // namespace kvw::app
