// Compile = tokenize + parse; render = a fresh Interpreter per call over the
// shared, immutable syntax tree.
#include "tokenizer/jinja_template.h"

#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_parser.h"

namespace tern {

Result<JinjaTemplate> JinjaTemplate::compile(std::string_view source) {
  TERN_ASSIGN_OR_RETURN(std::vector<jinja::Token> tokens, jinja::tokenize(source));
  TERN_ASSIGN_OR_RETURN(jinja::Body body, jinja::parse_template(std::move(tokens)));
  return JinjaTemplate(std::make_shared<const jinja::Body>(std::move(body)));
}

Result<std::string> JinjaTemplate::render(const JinjaValue& context, const JinjaLimits& limits) const {
  if (!context.is_dict() && !context.is_undefined()) {
    return invalid_argument("chat template context must be a dict, not " + std::string(context.type_name()));
  }
  jinja::Interpreter interpreter(limits);
  return interpreter.render(*body_, context);
}

}  // namespace tern
