// ExpressionParser: the expression half of jinja2's Parser (precedence from
// condexpr down to postfix, filters and tests; assignment targets) over a
// token vector, plus the cursor helpers the statement parser builds on.
// Every node is sealed with its subtree height, and recursion is bounded by
// kMaxParseDepth, so deep or long chains fail to compile instead of
// overflowing the stack later.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/depth_guard.h"
#include "base/status.h"
#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace tern::jinja {

inline constexpr uint32_t kMaxParseDepth = 128;

// "'name'", "end of print statement", ... as jinja2 describes tokens.
std::string describe(const Token& t);

class ExpressionParser {
 public:
  explicit ExpressionParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Result<ExprPtr> parse_expression(bool with_condexpr);
  // An expression, or a tuple when commas separate several; stops at the end
  // of the tag, ')' or one of `extra_end` (names).
  Result<ExprPtr> parse_tuple(bool with_condexpr, const std::vector<std::string_view>& extra_end, bool explicit_parens);
  // `| f(...) | g` applied to `node` (null for filter blocks and set blocks).
  Result<ExprPtr> parse_filter(ExprPtr node, bool start_inline);
  // Names, `ns.attr` (with_namespace) and tuples of them, up to `end_name`.
  Result<Target> parse_target(bool with_namespace, std::string_view end_name);

 protected:
  const Token& cur() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool at_name(std::string_view n) const { return cur().kind == TokenKind::kName && cur().text == n; }
  bool at_op(std::string_view op) const { return cur().kind == TokenKind::kOperator && cur().text == op; }
  bool skip_name(std::string_view n) {
    if (!at_name(n)) return false;
    next();
    return true;
  }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    next();
    return true;
  }
  Status fail(const Token& t, std::string_view message, ErrorCode code = ErrorCode::kParse) const;
  Status expect_op(std::string_view op);
  Status expect_kind(TokenKind kind);
  Result<std::string> expect_name();

  Status check_depth() const;

  uint32_t depth_ = 0;
  // One entry per macro being parsed: (its body reads varargs, reads kwargs).
  std::vector<std::pair<bool, bool>> macro_flags_;

 private:
  ExprPtr make(ExprKind kind, const Token& at) const;
  Result<ExprPtr> seal(ExprPtr e) const;
  Result<Target> parse_target_primary(bool with_namespace);
  bool is_tuple_end(const std::vector<std::string_view>& extra_end) const;
  Result<ExprPtr> parse_condexpr();
  Result<ExprPtr> parse_or();
  Result<ExprPtr> parse_and();
  Result<ExprPtr> parse_not();
  Result<ExprPtr> parse_compare();
  Result<ExprPtr> binary(const Token& at, BinaryOp op, ExprPtr left, ExprPtr right);
  Result<ExprPtr> parse_math1();
  Result<ExprPtr> parse_concat();
  Result<ExprPtr> parse_math2();
  Result<ExprPtr> parse_pow();
  Result<ExprPtr> parse_unary(bool with_filter);
  Result<ExprPtr> parse_primary();
  Result<ExprPtr> parse_list();
  Result<ExprPtr> parse_dict();
  Result<ExprPtr> parse_postfix(ExprPtr node);
  Result<ExprPtr> parse_filter_expr(ExprPtr node);
  Result<ExprPtr> parse_subscript(ExprPtr node);
  Result<ExprPtr> parse_subscribed();
  Status parse_call_args(Expr& e);
  Result<ExprPtr> parse_call(ExprPtr node);
  Result<std::string> dotted_name();
  Result<ExprPtr> parse_test(ExprPtr node);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

}  // namespace tern::jinja
