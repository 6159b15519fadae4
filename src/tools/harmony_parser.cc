// tools/harmony_parser.cc: GPT-OSS "harmony" output as a whole, e.g.
//   <|channel|>analysis<|message|>thinking...<|end|>
//   <|start|>assistant<|channel|>commentary to=functions.get_weather
//   <|constrain|>json<|message|>{"city":"Paris"}<|call|>
//   <|start|>assistant<|channel|>final<|message|>answer<|return|>
// (the recipient may also stand before <|channel|>). Routed by the stream filter itself
// (harmony_stream.h), so a streamed answer and a whole one cannot disagree: calls to
// functions.NAME are calls, analysis is reasoning, final (and commentary preambles) content.
#include "tools/harmony_stream.h"
#include "tools/tool_parser.h"

namespace kvw::tools {

ParsedToolOutput parse_harmony(std::string_view text) {
  HarmonyStreamFilter filter;
  HarmonyDelta sent = filter.push(text);
  ParsedToolOutput end = filter.finish();
  end.content = sent.content + end.content;
  end.reasoning = sent.reasoning + end.reasoning;
  return end;
}

}  // namespace kvw::tools
