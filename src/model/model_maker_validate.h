// model/model_maker_validate.h (internal to model_maker*.cc): make-model's checks of a spec per
// family; every message names the make-model flag.
#pragma once

#include "core/status.h"
#include "model/model_maker.h"

namespace kvw::maker {

Status refuse_deepseek2_flags(const MakeModelSpec& s);
bool is_gemma(const MakeModelSpec& s);
Status validate_gemma(const MakeModelSpec& s);
Status validate_llama_shape(const MakeModelSpec& s);
Status validate_qwen2moe(const MakeModelSpec& s);
Status validate_qwen3moe(const MakeModelSpec& s);
Status validate_deepseek2(const MakeModelSpec& s);
Status validate_phi3(const MakeModelSpec& s);

}  // namespace kvw::maker
