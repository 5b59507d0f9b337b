// Parses chat-template tokens into the syntax tree, following jinja2's
// Parser (same precedence, same statement grammar). Constructs tern does not
// implement and unknown filters or tests are load-time errors naming line
// and column; nesting deeper than kMaxParseDepth is refused so later tree
// walks stay bounded.
#pragma once

#include <vector>

#include "base/status.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace tern::jinja {

Result<Body> parse_template(std::vector<Token> tokens);

}  // namespace tern::jinja
