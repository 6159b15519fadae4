// planner/model_source.h: turns the planner's --model argument into a ModelShape: a catalogue
// name, a Hugging Face config.json, or a GGUF file (whose tensor bytes make the weights exact).
// The parsers take already-read inputs; only load_model_shape() touches the file system.
#pragma once

#include <string>

#include "core/status.h"
#include "planner/model_shape.h"

namespace kvw {
class GgufFile;
struct ModelHParams;
}  // namespace kvw

namespace kvw::planner {

// Parses a Hugging Face config.json (Llama, Mistral, Mixtral, Qwen2/2.5/3, Qwen3-MoE, Gemma-2,
// DeepSeek-V2/V3 and any config with `layer_types`). Errors name `name` and the key.
Result<ModelShape> shape_from_config_json(const std::string& json_text, const std::string& name);

// Reads hyper-parameters and exact tensor bytes from an open GGUF file.
Result<ModelShape> shape_from_gguf(const GgufFile& file);
// The same with its hyper-parameters already read (hparams_from_gguf of `file`).
Result<ModelShape> shape_from_gguf(const GgufFile& file, const ModelHParams& hp);

// `spec` ending in .gguf or .json is read from disk; anything else is a catalogue name.
Result<ModelShape> load_model_shape(const std::string& spec);

}  // namespace kvw::planner
