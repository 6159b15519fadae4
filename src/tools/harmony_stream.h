// tools/harmony_stream.h: GPT-OSS "harmony" output routed by channel as it streams. A reply is a
// run of messages, each a header ending in <|message|> and a body ending in <|end|>, <|call|>,
// <|return|> or the next <|start|>:
//   analysis                    -> reasoning (reasoning_content, as vLLM returns it)
//   commentary to=functions.F   -> a tool call, parsed when its message ends
//   final, commentary preambles -> content
// Body text goes out as soon as it cannot be the start of an end marker; headers are held, and
// a call goes out (take_calls) as soon as its message ends; or, with stream_arguments, piece by
// piece as it is written (take_call_deltas): its name once the header ends and its body opens
// with '{', then argument fragments as they arrive (gpt-oss ends a call with <|call|>, an end
// of generation, so a whole call would only go out when the output ends). An output that does not
// begin with a harmony header is plain content. The whole-text parse (parse_harmony) routes the
// same way, so a streamed answer adds up to the unstreamed one (for outputs whose calls parse).
// Owner: one choice of one stream (connection strand); not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tools/tool_call.h"

namespace kvw::tools {

enum class HarmonyRoute { kReasoning, kContent, kCall };
// Where the body of a message with this header goes; `call_name` gets the function of a call.
HarmonyRoute harmony_route(std::string_view header, std::string_view* call_name);

// Text of one push split by where it goes.
struct HarmonyDelta {
  std::string reasoning;
  std::string content;
};

class HarmonyStreamFilter {
 public:
  // parallel = false keeps only the first call (parallel_tool_calls). stream_arguments: calls
  // go out as deltas (take_call_deltas) as they are written, not whole (take_calls); a call
  // whose body does not open with '{' is held and parsed whole as before. A streamed call stays
  // a call even if its arguments turn out not to parse (the client already has its pieces).
  explicit HarmonyStreamFilter(bool parallel = true, bool stream_arguments = false)
      : parallel_(parallel), stream_arguments_(stream_arguments) {}
  // New output text -> reasoning and content safe to send now. A call whose message ends is
  // queued for take_calls(); the text after it waits for the next push (or finish()), so the
  // call follows what this push returned, as in the output.
  HarmonyDelta push(std::string_view text);
  // The calls whose message ended since the last take, in order; *first_index = the index
  // (OpenAI's tool_calls[].index) of the first of them.
  std::vector<ToolCall> take_calls(size_t* first_index);
  // stream_arguments: the call pieces written since the last take, in order (after finish():
  // the rest of a call cut off by the end of the output).
  std::vector<ToolCallDelta> take_call_deltas() { return std::exchange(deltas_, {}); }
  // The output ended: what is still held (a cut-off body's tail; everything when no message
  // ever started) and the calls not taken yet, in order; *first_index (optional) = the index of
  // the first of them. A call whose arguments do not parse comes back as content, its raw
  // message text. Call once.
  ParsedToolOutput finish(size_t* first_index = nullptr);
  size_t num_calls() const { return num_calls_; }  // whole calls so far (taken or not)

 private:
  enum class State { kStart, kPlain, kHeader, kBody };
  // Moves what held_ decides into `out`; returns false when it needs more text.
  bool step(HarmonyDelta& out);
  void end_message(std::string_view body, std::string_view end_marker);
  // stream_arguments: the current call's new body text `body` -> deltas (opens the call at its
  // first '{'; holds leading spaces until then).
  void stream_body(std::string_view body);

  State state_ = State::kStart;
  HarmonyRoute route_ = HarmonyRoute::kContent;
  std::string held_;          // text not decided yet
  std::string call_;          // the current call message's header and body so far
  std::string call_name_;     // its function
  bool any_message_ = false;  // some message's header was complete
  ParsedToolOutput done_;     // calls not taken yet (and malformed calls' text) so far
  bool parallel_ = true;
  bool stream_arguments_ = false;
  enum class CallStream { kWaiting, kOpen, kHeld };  // the current call's body so far
  CallStream call_stream_ = CallStream::kWaiting;
  std::vector<ToolCallDelta> deltas_;  // pieces not taken yet
  size_t num_calls_ = 0;               // whole calls, taken or not
  size_t num_taken_ = 0;               // handed out by take_calls()
};

}  // namespace kvw::tools
