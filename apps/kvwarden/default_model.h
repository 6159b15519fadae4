// apps/kvwarden/default_model.h: where `serve` and `generate` find the embedded default model
// (models/kvwarden-default.gguf in the source tree) when no --model is given.
#pragma once

#include <string>

namespace kvw::app {

// First existing of: $KVW_DEFAULT_MODEL, <exe dir>/../share/kvwarden/default.gguf,
// <source dir>/models/kvwarden-default.gguf. Empty when none exists.
std::string find_default_model();

}  // namespace kvw::app
