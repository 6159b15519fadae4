// model/model_maker_gptoss.h (internal to model_maker*.cc): make-model's gpt-oss family: the
// keys llama.cpp's GptOssModel converter writes, the spec checks, the tiny preset (its tensors:
// model/families/gpt_oss.cc).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "gguf/gguf_writer.h"
#include "model/model_maker.h"

namespace kvw::maker {

// gpt-oss-20b's structure at dim 128 (see make_model_preset).
MakeModelSpec gptoss_tiny();
Status validate_gptoss(const MakeModelSpec& s);  // messages name the make-model flag
// A harmony-format chat template (gpt-oss's roles, channels and <|start|>/<|end|> tokens).
extern const char* const kHarmonyTemplate;

}  // namespace kvw::maker
