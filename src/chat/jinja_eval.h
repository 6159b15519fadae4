// chat/jinja_eval.h: renders a parsed template against global variables.
// Thread safety: reads the (immutable) tree only; every call keeps its own values.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"
#include "core/status.h"

namespace kvw::jinja {

// The global holding strftime_now's time (an integer, seconds since the epoch); its name is no
// Jinja identifier, so no template can read or shadow it.
inline constexpr const char* kNowGlobal = "\x01now_unix";

// Errors: raise_exception(msg) returns exactly msg; runtime errors read
// "chat template LINE:COL: what went wrong".
Result<std::string> render_template(const NodeList& program, const ValueDict& globals);

// Where chosen dicts (the chat messages) start in the output: each time a for loop binds one of
// them as its item while writing the top-level output (not a `set` block or a macro's), the
// output's length then is stored at its index. The last such binding wins, so a scan that
// writes nothing (Qwen3's reversed loop) is overwritten by the loop that renders the turns.
struct ItemStarts {
  std::unordered_map<const void*, size_t> index;  // Value::dict_identity() -> item index
  std::vector<int64_t> starts;                    // [items] byte offset; -1: never bound
};
Result<std::string> render_template(const NodeList& program, const ValueDict& globals,
                                    ItemStarts* item_starts);

}  // namespace kvw::jinja
