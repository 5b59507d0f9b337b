// Compile = tokenize + parse + frame analysis; render = a fresh Interpreter
// per call over the shared, immutable syntax tree.
#include "jinja/template.h"

#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/symbols.h"

namespace tern {

Result<JinjaTemplate> JinjaTemplate::compile(std::string_view source) {
  TERN_ASSIGN_OR_RETURN(std::vector<jinja::Token> tokens, jinja::tokenize(source));
  auto program = std::make_shared<jinja::Program>();
  TERN_ASSIGN_OR_RETURN(program->body, jinja::parse_template(std::move(tokens)));
  jinja::resolve_frames(*program);
  return JinjaTemplate(std::move(program));
}

Result<std::string> JinjaTemplate::render(const JinjaValue& context, const JinjaLimits& limits) const {
  if (!context.is_dict() && !context.is_undefined()) {
    return invalid_argument("chat template context must be a dict, not " + std::string(context.type_name()));
  }
  jinja::Interpreter interpreter(limits);
  return interpreter.render(*program_, context);
}

}  // namespace tern
