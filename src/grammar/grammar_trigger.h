// grammar/grammar_trigger.h: what switches a lazy grammar on (llama.cpp's grammar triggers, own
// code). A lazy constraint leaves the output free until a trigger's text appears in it; from
// the trigger's first byte on the grammar applies (tool_choice "auto": a call, once started,
// follows its function's schema). Plain data.
#pragma once

#include <string>

namespace kvw::grammar {

struct GrammarTrigger {
  std::string text;       // the bytes that start the constrained part (the grammar begins there)
  bool at_start = false;  // only as the output's first non-space text (Llama 3's bare JSON call)
};

}  // namespace kvw::grammar
