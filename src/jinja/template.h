// JinjaTemplate: a chat template (tokenizer_config.json "chat_template" or
// --chat-template FILE) compiled once and rendered per request, byte for
// byte as transformers renders it with jinja2 (trim_blocks, lstrip_blocks,
// raise_exception, tojson). Compiling rejects unsupported constructs with
// "chat template line L, column C: ..."; rendering is bounded (JinjaLimits).
// A compiled template is immutable: render() may run on many threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "jinja/interpreter.h"
#include "jinja/value.h"

namespace tern {

class JinjaTemplate {
 public:
  // Errors: kParse (syntax), kUnsupported (a construct or filter tern does not
  // implement), kOutOfRange (template too large or nested too deeply).
  static Result<JinjaTemplate> compile(std::string_view source);

  // `context` is a dict of the template's variables (see chat/chat_context.h
  // for the one transformers builds). Errors: kInvalidArgument (a TypeError,
  // an undefined value used, or raise_exception from the template),
  // kOutOfRange (a JinjaLimits bound was hit), kUnsupported.
  Result<std::string> render(const JinjaValue& context, const JinjaLimits& limits = {}) const;

 private:
  explicit JinjaTemplate(std::shared_ptr<const jinja::Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const jinja::Program> program_;
};

}  // namespace tern
