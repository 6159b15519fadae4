// tools/tool_stream.h: a streamed output split into content to send now and tool calls
// decided at the end. Text that may be the start of a call (a prefix of a start marker, or, for
// Llama 3 JSON, a '{' opening the answer) is held back until it is decided; from a marker on,
// everything is kept and parsed once the output ends, and the calls go out then.
// Owner: one choice of one stream (connection strand); not thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tools/tool_call.h"

namespace kvw::tools {

class ToolStreamFilter {
 public:
  explicit ToolStreamFilter(ToolCallFormat format);
  // New output text -> the content that is safe to send now (may be empty).
  std::string push(std::string_view text);
  // The output ended: content not yet sent (text held back, or a call that did not parse) and
  // the calls. Call once.
  ParsedToolOutput finish();
  bool in_call() const { return in_call_; }

 private:
  // Index in held_ where a call starts, or npos; sets `partial` to where a possible marker
  // prefix begins at the end of held_ (npos when none).
  size_t find_start(size_t& partial) const;

  ToolCallFormat format_;
  std::vector<std::string_view> markers_;
  std::string held_;        // text not sent yet
  bool in_call_ = false;    // held_ begins with a call start
  bool sent_text_ = false;  // some non-space content has gone out
};

}  // namespace kvw::tools
