// grammar/grammar_trigger.h: what switches a lazy grammar on (llama.cpp's grammar triggers, own
// code). A lazy constraint leaves the output free until a trigger's text appears in it; from
// the trigger's first byte on the grammar applies (tool_choice "auto": a call, once started,
// follows its function's schema). Plain data.
#pragma once

#include <cstdint>
#include <string>

namespace kvw::grammar {

struct GrammarTrigger {
  std::string text;       // the bytes that start the constrained part (the grammar begins there)
  bool at_start = false;  // only as the output's first non-space text (Llama 3's bare JSON call)
  // The vocabulary's control token whose text is `text`, or -1. A control token has no bytes in
  // the TokenTrie (it is not rendered unless asked), so a model that writes the marker as that
  // one token (Mistral's [TOOL_CALLS], gpt-oss' <|call|>, a Qwen GGUF that marks <tool_call>
  // as control) would never match by text: sampling this id fires the trigger. Once the grammar
  // runs, the id is allowed wherever `text` may come next, and stands for `text`.
  int32_t token_id = -1;
  // false: not a trigger, only a control token the grammar may write as its text (a call's end
  // marker such as </tool_call> or DeepSeek's <｜tool▁call▁end｜>).
  bool fires = true;
};

}  // namespace kvw::grammar
