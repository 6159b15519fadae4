// fuzz/chat_template_fuzz.cc: the Jinja-subset chat template engine on arbitrary templates and
// message text (input: template, a NUL byte, then the message content). A template either
// parses or is refused; rendering either succeeds or returns an Error; the interpreter's own
// limits (loop iterations, range size, output size, macro depth) bound time and memory.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view source = in.substr(0, nul);
  const std::string content(nul == std::string_view::npos ? "" : in.substr(nul + 1));
  auto tmpl = kvw::ChatTemplate::parse(source);
  if (!tmpl.ok()) return 0;
  const std::vector<kvw::ChatMessage> messages = {
      {"system", "Be brief."}, {"user", content}, {"assistant", "Sure."}, {"user", content}};
  kvw::ChatRenderOptions opt;
  opt.bos_token = "<s>";
  opt.eos_token = "</s>";
  (void)tmpl->render(messages, opt);
  return 0;
}
