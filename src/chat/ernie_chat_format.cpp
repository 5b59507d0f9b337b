// The ERNIE 4.5 chat template rendered in C++ (MODEL.md, "Chat template"),
// byte for byte what HF's apply_chat_template gives for it. The generic
// Jinja engine is not needed for this model.
#include "chat/ernie_chat_format.h"

namespace tern {

std::string render_ernie_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              const std::string& cls_token, const std::string& sep_token) {
  std::string out = cls_token;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      out += m.content;
      out += '\n';
    } else if (m.role == "user") {
      out += "User: ";
      out += m.content;
      out += '\n';
    } else if (m.role == "assistant") {
      out += "Assistant: ";
      out += m.content;
      out += sep_token;
    }
    // Other roles (tool, function, ...) are dropped, as the template does.
  }
  if (add_generation_prompt) out += "Assistant: ";
  return out;
}

}  // namespace tern
