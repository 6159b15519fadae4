// tools/tool_stream.h: a streamed output split into content to send now and tool calls sent as
// soon as each is whole. Text that may be the start of a call (a prefix of a start marker, or,
// for Llama 3 JSON, a '{' opening the answer) is held back until it is decided; from a marker
// on, the text is held until the call closes (</tool_call>, the JSON object's last brace, ...),
// then the call goes out and what follows is filtered again. A call that closes but does not
// parse is parsed once the output ends, as the non-streamed answer is. Harmony outputs go
// through HarmonyStreamFilter instead.
// Owner: one choice of one stream (connection strand); not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tools/tool_call.h"

namespace kvw::tools {

// For a text that begins with a call start: the bytes of it that make whole calls now, and
// those calls. bytes = 0: no whole call yet (always for harmony). malformed:
// the first call has closed but does not parse.
struct LeadingCalls {
  size_t bytes = 0;
  std::vector<ToolCall> calls;
  bool malformed = false;
};
LeadingCalls leading_calls(ToolCallFormat format, std::string_view text);

class ToolStreamFilter {
 public:
  // parallel = false keeps only the first call (parallel_tool_calls), as the non-streamed
  // answer does.
  explicit ToolStreamFilter(ToolCallFormat format, bool parallel = true);
  // New output text -> the content that is safe to send now (may be empty). Calls that became
  // whole are queued for take_calls(); they follow this content in the output.
  std::string push(std::string_view text);
  // The calls that became whole since the last take, in order; *first_index = the index
  // (OpenAI's tool_calls[].index) of the first of them.
  std::vector<ToolCall> take_calls(size_t* first_index);
  // The output ended: content not yet sent (text held back, or a call that did not parse) and
  // the calls not taken yet; *first_index (optional) = the index of the first of them. Call once.
  ParsedToolOutput finish(size_t* first_index = nullptr);
  bool in_call() const { return in_call_; }
  size_t num_calls() const { return num_calls_; }  // given out (taken or from finish) so far

 private:
  // Index in held_ where a call starts, or npos; sets `partial` to where a possible marker
  // prefix begins at the end of held_ (npos when none).
  size_t find_start(size_t& partial) const;
  std::string take_content();  // the content before any call start; sets in_call_
  void add_calls(std::vector<ToolCall> calls);

  ToolCallFormat format_;
  bool parallel_ = true;
  std::vector<std::string_view> markers_;
  std::string held_;             // text not sent yet
  bool in_call_ = false;         // held_ begins with a call start
  bool sent_text_ = false;       // some non-space content has gone out
  bool after_call_ = false;      // a call went out and no content since (separators are dropped)
  bool decide_at_end_ = false;   // a call closed malformed: the rest is parsed by finish()
  std::vector<ToolCall> ready_;  // whole calls not taken yet
  size_t num_taken_ = 0;         // calls handed out by take_calls()
  size_t num_calls_ = 0;
};

}  // namespace kvw::tools
