#include "tools/harmony_stream.h"

#include <algorithm>
#include <utility>

#include "tools/tool_parser.h"

namespace kvw::tools {
namespace {

constexpr std::string_view kChannel = "<|channel|>", kStart = "<|start|>", kMessage = "<|message|>";
constexpr std::string_view kEnds[] = {"<|end|>", "<|call|>", "<|return|>", kStart};

// "to=functions.NAME" in a message header -> NAME (empty when the message is not a call).
std::string_view recipient(std::string_view header) {
  constexpr std::string_view kTo = "to=functions.";
  const size_t at = header.find(kTo);
  if (at == std::string_view::npos) return {};
  std::string_view name = header.substr(at + kTo.size());
  return name.substr(0, name.find_first_of(" \t\n<"));
}

// Where the earliest end marker starts in `text` (npos when none) and which it is.
size_t find_end(std::string_view text, std::string_view* marker) {
  size_t best = std::string_view::npos;
  for (std::string_view e : kEnds) {
    const size_t at = text.find(e);
    if (at < best) best = at, *marker = e;
  }
  return best;
}

// Length of the longest tail of `text` that an end marker begins with (held back: the next
// push may complete it).
size_t marker_tail(std::string_view text) {
  size_t best = 0;
  for (std::string_view e : kEnds) {
    for (size_t n = std::min(e.size() - 1, text.size()); n > best; --n) {
      if (text.substr(text.size() - n) == e.substr(0, n)) {
        best = n;
        break;
      }
    }
  }
  return best;
}

}  // namespace

HarmonyRoute harmony_route(std::string_view header, std::string_view* call_name) {
  *call_name = recipient(header);
  if (!call_name->empty()) return HarmonyRoute::kCall;
  const size_t at = header.find(kChannel);
  if (at == std::string_view::npos) return HarmonyRoute::kContent;
  std::string_view channel = header.substr(at + kChannel.size());
  channel = channel.substr(0, channel.find_first_of(" \t\n<"));
  return channel == "analysis" ? HarmonyRoute::kReasoning : HarmonyRoute::kContent;
}

void HarmonyStreamFilter::stream_body(std::string_view body) {
  if (call_stream_ == CallStream::kOpen) {
    if (!body.empty()) deltas_.push_back({.index = num_calls_, .arguments = std::string(body)});
    return;
  }
  if (call_stream_ != CallStream::kWaiting) return;
  // The body so far (call_ holds the header and the body, `body` included).
  const std::string_view so_far =
      std::string_view(call_).substr(call_.rfind(kMessage) + kMessage.size());
  const size_t first = so_far.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return;  // only spaces yet
  if (so_far[first] != '{') {
    call_stream_ = CallStream::kHeld;  // not JSON arguments: parsed whole at its end
    return;
  }
  call_stream_ = CallStream::kOpen;
  deltas_.push_back({.index = num_calls_, .name = call_name_});
  deltas_.push_back({.index = num_calls_, .arguments = std::string(so_far.substr(first))});
}

void HarmonyStreamFilter::end_message(std::string_view body, std::string_view end_marker) {
  if (call_stream_ == CallStream::kOpen) {
    // Its pieces are out: it counts as given, whatever its arguments turned out to be.
    ++num_calls_, ++num_taken_;
    call_.clear();
    call_stream_ = CallStream::kWaiting;
    return;
  }
  call_stream_ = CallStream::kWaiting;
  if (end_marker != kStart) call_ += end_marker;  // a malformed call comes back whole
  std::optional<ToolCall> call = call_from_parts(call_name_, body);
  if (call) {
    if (parallel_ || num_calls_ == 0) done_.calls.push_back(std::move(*call)), ++num_calls_;
  } else {
    done_.content += call_;
  }
  call_.clear();
}

bool HarmonyStreamFilter::step(HarmonyDelta& out) {
  switch (state_) {
    case State::kStart: {
      if (held_.empty()) return false;
      for (std::string_view m : {kChannel, kStart}) {
        if (held_.starts_with(m)) {
          state_ = State::kHeader;
          return true;
        }
        if (m.starts_with(held_)) return false;  // may still become a header
      }
      state_ = State::kPlain;
      return true;
    }
    case State::kPlain:
      out.content += held_;
      held_.clear();
      return false;
    case State::kHeader: {
      const size_t at = held_.find(kMessage);
      if (at == std::string::npos) return false;
      std::string_view name;
      route_ = harmony_route(std::string_view(held_).substr(0, at), &name);
      any_message_ = true;
      if (route_ == HarmonyRoute::kCall) {
        call_name_ = std::string(name);
        call_ = held_.substr(0, at + kMessage.size());
        const bool kept = parallel_ || num_calls_ == 0;
        call_stream_ = stream_arguments_ && kept ? CallStream::kWaiting : CallStream::kHeld;
      }
      held_.erase(0, at + kMessage.size());
      state_ = State::kBody;
      return true;
    }
    case State::kBody: {
      std::string_view marker;
      const size_t end = find_end(held_, &marker);
      const size_t n = end != std::string::npos ? end : held_.size() - marker_tail(held_);
      const std::string_view body = std::string_view(held_).substr(0, n);
      if (route_ == HarmonyRoute::kReasoning) out.reasoning += body;
      if (route_ == HarmonyRoute::kContent) out.content += body;
      if (route_ == HarmonyRoute::kCall) call_ += body, stream_body(body);
      if (end == std::string::npos) {
        held_.erase(0, n);
        return false;
      }
      if (route_ == HarmonyRoute::kCall) {
        end_message(std::string_view(call_).substr(call_.rfind(kMessage) + kMessage.size()),
                    marker);
      }
      // <|start|> opens the next header; the other markers are dropped.
      held_.erase(0, n + (marker == kStart ? 0 : marker.size()));
      state_ = State::kHeader;
      return true;
    }
  }
  return false;
}

HarmonyDelta HarmonyStreamFilter::push(std::string_view text) {
  held_ += text;
  HarmonyDelta out;
  const size_t calls_before = num_calls_;
  while (num_calls_ == calls_before && step(out)) {
  }
  return out;
}

std::vector<ToolCall> HarmonyStreamFilter::take_calls(size_t* first_index) {
  *first_index = num_taken_;
  num_taken_ += done_.calls.size();
  return std::exchange(done_.calls, {});
}

ParsedToolOutput HarmonyStreamFilter::finish(size_t* first_index) {
  HarmonyDelta rest;  // what the last push left after a call
  while (step(rest)) {
  }
  if (first_index) *first_index = num_taken_;
  ParsedToolOutput out = std::move(done_);
  out.content = rest.content + out.content;
  out.reasoning = rest.reasoning + out.reasoning;
  if (state_ == State::kBody) {
    if (route_ == HarmonyRoute::kReasoning) out.reasoning += held_;
    if (route_ == HarmonyRoute::kContent) out.content += held_;
    if (route_ == HarmonyRoute::kCall) {
      // A call cut at the end of the output: parse what came (or send the rest of its pieces).
      call_ += held_;
      stream_body(held_);
      done_ = {};
      end_message(std::string_view(call_).substr(call_.rfind(kMessage) + kMessage.size()), {});
      out.content += done_.content;
      for (ToolCall& c : done_.calls) out.calls.push_back(std::move(c));
    }
  } else if (!any_message_) {
    out.content += held_;  // never a harmony message: the whole output is content
  }
  held_.clear();
  state_ = State::kPlain;
  return out;
}

}  // namespace kvw::tools
