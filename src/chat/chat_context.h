// The variables a chat template sees, built as transformers'
// apply_chat_template builds them: messages, tools (None when absent),
// documents (None when absent), add_generation_prompt, the special tokens
// (bos_token, eos_token, ...) and the request's chat_template_kwargs, which
// may override special tokens but not the four names before them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "jinja/value.h"

namespace tern {

struct ChatTemplateInputs {
  JinjaValue messages;   // list of message dicts (role, content, tool_calls, ...), e.g. from jinja_from_json
  JinjaValue tools;      // list of tool schemas; undefined or none = no tools
  JinjaValue documents;  // list; undefined or none = no documents
  bool add_generation_prompt = false;
  // transformers' special_tokens_map, e.g. {"bos_token", "<s>"}, {"cls_token", ...}.
  std::vector<std::pair<std::string, std::string>> special_tokens;
  JinjaValue chat_template_kwargs;  // dict or undefined
};

// Errors (kInvalidArgument): messages not a list, kwargs not a dict, or a
// kwarg named messages/tools/documents/add_generation_prompt.
Result<JinjaValue> make_chat_context(const ChatTemplateInputs& inputs);

}  // namespace tern
