// Statement parsing of jinja2's Parser (jinja2/parser.py): template data,
// {{ }} outputs and the tags for/if/set/macro/with/filter/print/break/
// continue plus transformers' generation tag. Tags jinja2 has but tern does
// not implement (include, extends, call, ...) fail with "unsupported tag".
#include "jinja/parser.h"

#include <algorithm>

#include "jinja/expression_parser.h"

namespace tern::jinja {
namespace {

constexpr std::string_view kUnsupportedTags[] = {"block", "extends",    "include", "import",    "from",
                                                 "call",  "autoescape", "trans",   "pluralize", "do"};

std::string quoted_list(const std::vector<std::string_view>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += "'" + std::string(names[i]) + "'";
  }
  return out;
}

class StatementParser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  Result<Body> parse() {
    TERN_ASSIGN_OR_RETURN(Body body, subparse({}));
    if (cur().kind != TokenKind::kEof) return fail(cur(), "unexpected " + describe(cur()));
    return body;
  }

 private:
  Result<Body> subparse(const std::vector<std::string_view>& end_names) {
    DepthGuard guard(depth_);
    TERN_RETURN_IF_ERROR(check_depth());
    Body body;
    while (cur().kind != TokenKind::kEof) {
      const Token& t = cur();
      if (t.kind == TokenKind::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kData;
        s->line = t.line;
        s->column = t.column;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.kind == TokenKind::kVariableBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = t.line;
        s->column = t.column;
        next();
        TERN_ASSIGN_OR_RETURN(s->expr, parse_tuple(true, {}, false));
        TERN_RETURN_IF_ERROR(expect_kind(TokenKind::kVariableEnd));
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        next();
        if (cur().kind == TokenKind::kName &&
            std::find(end_names.begin(), end_names.end(), cur().text) != end_names.end()) {
          return body;
        }
        TERN_ASSIGN_OR_RETURN(StmtPtr s, parse_statement());
        TERN_RETURN_IF_ERROR(expect_kind(TokenKind::kBlockEnd));
        body.push_back(std::move(s));
      } else {
        return fail(t, "unexpected " + describe(t));
      }
    }
    return body;
  }

  // Parses `[:] %}` body up to one of `end_names`; leaves the end name current
  // (or consumes it with drop_needle).
  Result<Body> parse_statements(const Token& opener, const std::vector<std::string_view>& end_names, bool drop_needle) {
    skip_op(":");
    TERN_RETURN_IF_ERROR(expect_kind(TokenKind::kBlockEnd));
    TERN_ASSIGN_OR_RETURN(Body body, subparse(end_names));
    if (cur().kind == TokenKind::kEof) {
      return fail(cur(), "unexpected end of template: '" + opener.text + "' opened at line " +
                             std::to_string(opener.line) + " is never closed (expected " + quoted_list(end_names) +
                             ")");
    }
    if (drop_needle) next();
    return body;
  }

  StmtPtr new_stmt(StmtKind kind, const Token& at) const {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  Result<StmtPtr> parse_statement() {
    const Token tag = cur();
    if (tag.kind != TokenKind::kName) return fail(tag, "tag name expected");
    const std::string& n = tag.text;
    if (n == "for") return parse_for();
    if (n == "if") return parse_if();
    if (n == "set") return parse_set();
    if (n == "macro") return parse_macro();
    if (n == "with") return parse_with();
    if (n == "filter") return parse_filter_block();
    if (n == "print") return parse_print();
    if (n == "generation") {  // transformers' AssistantTracker: a call block, so a scope of its own
      next();
      StmtPtr s = new_stmt(StmtKind::kWith, tag);
      TERN_ASSIGN_OR_RETURN(s->body, parse_statements(tag, {"endgeneration"}, true));
      return s;
    }
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) return fail(tag, "'" + n + "' outside of a for loop");
      next();
      return new_stmt(n == "break" ? StmtKind::kBreak : StmtKind::kContinue, tag);
    }
    for (std::string_view u : kUnsupportedTags) {
      if (n == u) return fail(tag, "unsupported tag '" + n + "'", ErrorCode::kUnsupported);
    }
    if (n.rfind("end", 0) == 0 || n == "elif" || n == "else") return fail(tag, "unexpected tag '" + n + "'");
    return fail(tag, "unknown tag '" + n + "'", ErrorCode::kUnsupported);
  }

  Result<StmtPtr> parse_for() {
    const Token tag = cur();
    next();
    StmtPtr s = new_stmt(StmtKind::kFor, tag);
    TERN_ASSIGN_OR_RETURN(s->target, parse_target(false, "in"));
    if (!skip_name("in")) return fail(cur(), "expected 'in', got " + describe(cur()));
    TERN_ASSIGN_OR_RETURN(s->expr, parse_tuple(false, {"recursive"}, false));
    if (skip_name("if")) {
      TERN_ASSIGN_OR_RETURN(s->filter, parse_expression(true));
    }
    if (at_name("recursive")) return fail(cur(), "recursive for loops are not supported", ErrorCode::kUnsupported);
    ++loop_depth_;
    auto body = parse_statements(tag, {"endfor", "else"}, false);
    --loop_depth_;
    if (!body.is_ok()) return body.status();
    s->body = std::move(body).value();
    bool has_else = cur().text == "else";
    next();
    if (has_else) {
      TERN_ASSIGN_OR_RETURN(s->else_body, parse_statements(tag, {"endfor"}, true));
    }
    return s;
  }

  Result<StmtPtr> parse_if() {
    const Token tag = cur();
    next();
    StmtPtr s = new_stmt(StmtKind::kIf, tag);
    while (true) {
      IfBranch branch;
      TERN_ASSIGN_OR_RETURN(branch.test, parse_tuple(false, {}, false));
      TERN_ASSIGN_OR_RETURN(branch.body, parse_statements(tag, {"elif", "else", "endif"}, false));
      s->branches.push_back(std::move(branch));
      std::string end = cur().text;
      next();
      if (end == "elif") continue;
      if (end == "else") {
        TERN_ASSIGN_OR_RETURN(s->else_body, parse_statements(tag, {"endif"}, true));
      }
      break;
    }
    return s;
  }

  Result<StmtPtr> parse_set() {
    const Token tag = cur();
    next();
    TERN_ASSIGN_OR_RETURN(Target target, parse_target(true, ""));
    if (skip_op("=")) {
      StmtPtr s = new_stmt(StmtKind::kSet, tag);
      s->target = std::move(target);
      TERN_ASSIGN_OR_RETURN(s->expr, parse_tuple(true, {}, false));
      return s;
    }
    StmtPtr s = new_stmt(StmtKind::kSetBlock, tag);
    s->target = std::move(target);
    if (at_op("|")) {
      TERN_ASSIGN_OR_RETURN(s->filter, parse_filter(nullptr, false));
    }
    TERN_ASSIGN_OR_RETURN(s->body, parse_statements(tag, {"endset"}, true));
    return s;
  }

  Result<StmtPtr> parse_macro() {
    const Token tag = cur();
    next();
    StmtPtr s = new_stmt(StmtKind::kMacro, tag);
    TERN_ASSIGN_OR_RETURN(s->name, expect_name());
    TERN_RETURN_IF_ERROR(expect_op("("));
    while (!at_op(")")) {
      if (!s->params.empty()) TERN_RETURN_IF_ERROR(expect_op(","));
      MacroParam p;
      TERN_ASSIGN_OR_RETURN(p.name, expect_name());
      if (skip_op("=")) {
        TERN_ASSIGN_OR_RETURN(p.default_value, parse_expression(true));
      } else if (!s->params.empty() && s->params.back().default_value) {
        return fail(cur(), "non-default argument follows default argument");
      }
      s->params.push_back(std::move(p));
    }
    next();
    int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    macro_flags_.emplace_back(false, false);
    auto body = parse_statements(tag, {"endmacro"}, true);
    loop_depth_ = saved_loop_depth;
    s->catch_varargs = macro_flags_.back().first;
    s->catch_kwargs = macro_flags_.back().second;
    macro_flags_.pop_back();
    if (!body.is_ok()) return body.status();
    s->body = std::move(body).value();
    return s;
  }

  Result<StmtPtr> parse_with() {
    const Token tag = cur();
    next();
    StmtPtr s = new_stmt(StmtKind::kWith, tag);
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!s->assignments.empty()) TERN_RETURN_IF_ERROR(expect_op(","));
      TERN_ASSIGN_OR_RETURN(Target t, parse_target(false, ""));
      TERN_RETURN_IF_ERROR(expect_op("="));
      TERN_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      s->assignments.emplace_back(std::move(t), std::move(value));
    }
    TERN_ASSIGN_OR_RETURN(s->body, parse_statements(tag, {"endwith"}, true));
    return s;
  }

  Result<StmtPtr> parse_filter_block() {
    const Token tag = cur();
    next();
    StmtPtr s = new_stmt(StmtKind::kFilterBlock, tag);
    TERN_ASSIGN_OR_RETURN(s->filter, parse_filter(nullptr, true));
    TERN_ASSIGN_OR_RETURN(s->body, parse_statements(tag, {"endfilter"}, true));
    return s;
  }

  Result<StmtPtr> parse_print() {
    const Token tag = cur();
    next();
    StmtPtr s = new_stmt(StmtKind::kScope, tag);  // a body of outputs, rendered in place
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!s->body.empty()) TERN_RETURN_IF_ERROR(expect_op(","));
      StmtPtr out = new_stmt(StmtKind::kOutput, cur());
      TERN_ASSIGN_OR_RETURN(out->expr, parse_expression(true));
      s->body.push_back(std::move(out));
    }
    return s;
  }

  // Assignment targets: names, `ns.attr` (set only) and tuples of them.
  int loop_depth_ = 0;
};

}  // namespace

Result<Body> parse_template(std::vector<Token> tokens) { return StatementParser(std::move(tokens)).parse(); }

}  // namespace tern::jinja
