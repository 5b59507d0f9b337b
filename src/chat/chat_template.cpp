// Chat renderers: a compiled Jinja template or the ERNIE 4.5 fallback.
#include "chat/chat_template.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <utility>
#include <vector>

#include "base/mapped_file.h"
#include "chat/chat_context.h"
#include "chat/ernie_chat_format.h"
#include "jinja/json.h"
#include "jinja/template.h"

namespace tern {

Result<ChatRenderer> make_chat_renderer(const std::string& source, const Tokenizer& tok) {
  if (source.empty()) {
    return ChatRenderer([&tok](const nlohmann::json& messages, bool agp, const nlohmann::json&) -> Result<std::string> {
      std::vector<ChatMessage> msgs;
      for (const auto& m : messages) {
        if (!m.is_object() || !m.value("role", nlohmann::json()).is_string() ||
            !m.value("content", nlohmann::json()).is_string()) {
          return invalid_argument("the ERNIE 4.5 chat format takes messages with a string role and content");
        }
        msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
      return render_ernie_chat(msgs, agp, tok.cls_token(), tok.sep_token());
    });
  }
  auto compiled = JinjaTemplate::compile(source);
  if (!compiled.is_ok()) return compiled.status().with_context("chat template");
  auto tmpl = std::make_shared<JinjaTemplate>(std::move(compiled).value());
  std::vector<std::pair<std::string, std::string>> specials = {{"bos_token", tok.bos_token()},
                                                               {"eos_token", tok.eos_token()}};
  if (!tok.cls_token().empty()) specials.emplace_back("cls_token", tok.cls_token());
  if (!tok.sep_token().empty()) specials.emplace_back("sep_token", tok.sep_token());
  return ChatRenderer([tmpl, specials](const nlohmann::json& messages, bool agp,
                                       const nlohmann::json& kwargs) -> Result<std::string> {
    ChatTemplateInputs in;
    TERN_ASSIGN_OR_RETURN(in.messages, jinja_from_json(messages));
    TERN_ASSIGN_OR_RETURN(in.chat_template_kwargs, jinja_from_json(kwargs));
    in.add_generation_prompt = agp;
    in.special_tokens = specials;
    TERN_ASSIGN_OR_RETURN(JinjaValue context, make_chat_context(in));
    return tmpl->render(context);
  });
}

Result<ChatRenderer> make_chat_renderer_for(const Tokenizer& tokenizer, const std::string& template_file) {
  if (template_file.empty()) return make_chat_renderer(tokenizer.chat_template(), tokenizer);
  TERN_ASSIGN_OR_RETURN(std::string source, read_text_file(template_file));
  return make_chat_renderer(source, tokenizer);
}

}  // namespace tern
