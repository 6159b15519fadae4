// apps/kvwarden/default_model.h: where `serve` and `generate` find the default model (a file, not
// part of the binary) when no --model is given.
#pragma once

#include <string>

namespace kvw::app {

// First existing of: $KVW_DEFAULT_MODEL, <exe dir>/../share/kvwarden/default.gguf,
// <source dir>/models/kvwarden-default.gguf. Empty when none exists.
std::string find_default_model();

// --model's help in serve and generate: where the default comes from.
inline constexpr const char* kModelFlagHelp =
    "GGUF model file (default: $KVW_DEFAULT_MODEL when set, else share/kvwarden/default.gguf "
    "beside the installed binary, else the source tree's models/kvwarden-default.gguf)";

// Why find_default_model() found nothing, naming $KVW_DEFAULT_MODEL when it points nowhere.
std::string missing_default_model_message();

}  // namespace kvw::app
