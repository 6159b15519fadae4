// model/model_maker_gptoss.h (internal to model_maker*.cc): make-model's gpt-oss family: the
// keys and tensors llama.cpp's GptOssModel converter writes, the spec checks, the tiny preset.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "gguf/gguf_writer.h"
#include "model/model_maker.h"
#include "model/model_maker_tensors.h"

namespace kvw::maker {

// gpt-oss-20b's structure at dim 128 (see make_model_preset).
MakeModelSpec gptoss_tiny();
Status validate_gptoss(const MakeModelSpec& s);  // messages name the make-model flag
void set_gptoss_keys(const MakeModelSpec& s, GgufWriter& w);
void write_gptoss_tensors(const MakeModelSpec& s, int64_t n_vocab, TensorMaker& tm);
// A harmony-format chat template (gpt-oss's roles, channels and <|start|>/<|end|> tokens).
extern const char* const kHarmonyTemplate;

}  // namespace kvw::maker
