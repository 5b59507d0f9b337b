// Builds the render context of a chat template (see chat/chat_context.h),
// mirroring transformers' render call:
//   template.render(messages=..., tools=..., documents=...,
//                   add_generation_prompt=..., **special_tokens, **kwargs)
#include "chat/chat_context.h"

namespace tern {

Result<JinjaValue> make_chat_context(const ChatTemplateInputs& inputs) {
  if (!inputs.messages.is_list()) {
    return invalid_argument("chat messages must be a list, not " + std::string(inputs.messages.type_name()));
  }
  auto absent_is_none = [](const JinjaValue& v) { return v.is_undefined() ? JinjaValue::none() : v; };
  JinjaDict ctx;
  ctx.set(std::string("messages"), inputs.messages);
  ctx.set(std::string("tools"), absent_is_none(inputs.tools));
  ctx.set(std::string("documents"), absent_is_none(inputs.documents));
  ctx.set(std::string("add_generation_prompt"), JinjaValue::boolean(inputs.add_generation_prompt));
  for (const auto& [name, token] : inputs.special_tokens) ctx.set(std::string(name), JinjaValue::string(token));
  if (inputs.chat_template_kwargs.is_dict()) {
    for (const auto& [key, value] : inputs.chat_template_kwargs.as_dict().items()) {
      if (!key.is_string()) return invalid_argument("chat_template_kwargs keys must be strings");
      const std::string& k = key.as_string();
      if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt") {
        return invalid_argument("chat_template_kwargs may not set '" + k + "'");
      }
      ctx.set(std::string(k), value);
    }
  } else if (!inputs.chat_template_kwargs.is_undefined() && !inputs.chat_template_kwargs.is_none()) {
    return invalid_argument("chat_template_kwargs must be an object");
  }
  return JinjaValue::dict(std::move(ctx));
}

}  // namespace tern
