// Expression parsing of jinja2's Parser (jinja2/parser.py, parse_expression
// and below): condexpr, or/and/not, comparisons, + - ~ * / // % **, unary
// signs, primaries, subscripts, calls, filters and tests, and assignment
// targets.
#include "jinja/expression_parser.h"

#include <algorithm>

#include "jinja/filters.h"

namespace tern::jinja {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kData:
      return "template data";
    case TokenKind::kVariableBegin:
      return "begin of print statement";
    case TokenKind::kVariableEnd:
      return "end of print statement";
    case TokenKind::kBlockBegin:
      return "begin of statement block";
    case TokenKind::kBlockEnd:
      return "end of statement block";
    case TokenKind::kName:
    case TokenKind::kOperator:
      return "'" + t.text + "'";
    case TokenKind::kString:
      return "string";
    case TokenKind::kInteger:
      return "integer";
    case TokenKind::kFloat:
      return "float";
    case TokenKind::kEof:
      return "end of template";
  }
  return "token";
}

Status ExpressionParser::fail(const Token& t, std::string_view message, ErrorCode code) const {
  return template_error(code, t.line, t.column, message);
}
Status ExpressionParser::expect_op(std::string_view op) {
  if (!skip_op(op)) return fail(cur(), "expected '" + std::string(op) + "', got " + describe(cur()));
  return Status::ok();
}
Status ExpressionParser::expect_kind(TokenKind kind) {
  if (cur().kind != kind) {
    Token want;
    want.kind = kind;
    return fail(cur(), "expected " + describe(want) + ", got " + describe(cur()));
  }
  next();
  return Status::ok();
}
Result<std::string> ExpressionParser::expect_name() {
  if (cur().kind != TokenKind::kName) return fail(cur(), "expected a name, got " + describe(cur()));
  std::string n = cur().text;
  next();
  return n;
}

// Depth guard for every recursive path of the grammar.
Status ExpressionParser::check_depth() const {
  if (depth_ > kMaxParseDepth) return fail(cur(), "template nested too deeply", ErrorCode::kOutOfRange);
  return Status::ok();
}

ExprPtr ExpressionParser::make(ExprKind kind, const Token& at) const {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = at.line;
  e->column = at.column;
  return e;
}
// Records the subtree height; refuses trees too deep to walk safely.
Result<ExprPtr> ExpressionParser::seal(ExprPtr e) const {
  uint32_t d = e->target ? e->target->depth : 0;
  for (const ExprPtr& a : e->args) {
    if (a) d = std::max(d, a->depth);
  }
  for (const Keyword& k : e->kwargs) d = std::max(d, k.value->depth);
  e->depth = d + 1;
  if (e->depth > 2 * kMaxParseDepth) {
    return template_error(ErrorCode::kOutOfRange, e->line, e->column, "expression nested too deeply");
  }
  return e;
}

Result<Target> ExpressionParser::parse_target(bool with_namespace, std::string_view end_name) {
  const Token first = cur();
  std::vector<Target> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) TERN_RETURN_IF_ERROR(expect_op(","));
    if (cur().kind == TokenKind::kBlockEnd || at_op(")") || (!end_name.empty() && at_name(end_name))) break;
    TERN_ASSIGN_OR_RETURN(Target t, parse_target_primary(with_namespace));
    items.push_back(std::move(t));
    if (at_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (items.empty()) return fail(cur(), "expected an assignment target, got " + describe(cur()));
  if (!is_tuple) return std::move(items[0]);
  Target t;
  t.kind = Target::Kind::kTuple;
  t.items = std::move(items);
  t.line = first.line;
  t.column = first.column;
  return t;
}

Result<Target> ExpressionParser::parse_target_primary(bool with_namespace) {
  DepthGuard guard(depth_);
  TERN_RETURN_IF_ERROR(check_depth());
  const Token t = cur();
  Target target;
  target.line = t.line;
  target.column = t.column;
  if (t.kind == TokenKind::kName) {
    if (t.text == "true" || t.text == "false" || t.text == "True" || t.text == "False" || t.text == "none" ||
        t.text == "None") {
      return fail(t, "can't assign to const");
    }
    next();
    target.name = t.text;
    if (with_namespace && skip_op(".")) {
      target.kind = Target::Kind::kNamespaceAttr;
      TERN_ASSIGN_OR_RETURN(target.attr, expect_name());
    }
    return target;
  }
  if (skip_op("(")) {
    TERN_ASSIGN_OR_RETURN(target, parse_target(with_namespace, ""));
    TERN_RETURN_IF_ERROR(expect_op(")"));
    return target;
  }
  return fail(t, "can't assign to " + describe(t));
}

// ---- expressions ----
bool ExpressionParser::is_tuple_end(const std::vector<std::string_view>& extra_end) const {
  if (cur().kind == TokenKind::kVariableEnd || cur().kind == TokenKind::kBlockEnd || at_op(")")) return true;
  for (std::string_view n : extra_end) {
    if (at_name(n)) return true;
  }
  return false;
}

Result<ExprPtr> ExpressionParser::parse_tuple(bool with_condexpr, const std::vector<std::string_view>& extra_end,
                                              bool explicit_parens) {
  const Token first = cur();
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) TERN_RETURN_IF_ERROR(expect_op(","));
    if (is_tuple_end(extra_end)) break;
    TERN_ASSIGN_OR_RETURN(ExprPtr e, parse_expression(with_condexpr));
    args.push_back(std::move(e));
    if (at_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parens) return fail(cur(), "expected an expression, got " + describe(cur()));
  }
  ExprPtr t = make(ExprKind::kTuple, first);
  t->args = std::move(args);
  return seal(std::move(t));
}

Result<ExprPtr> ExpressionParser::parse_expression(bool with_condexpr) {
  DepthGuard guard(depth_);
  TERN_RETURN_IF_ERROR(check_depth());
  return with_condexpr ? parse_condexpr() : parse_or();
}

Result<ExprPtr> ExpressionParser::parse_condexpr() {
  DepthGuard guard(depth_);
  TERN_RETURN_IF_ERROR(check_depth());
  const Token first = cur();
  TERN_ASSIGN_OR_RETURN(ExprPtr expr1, parse_or());
  while (skip_name("if")) {
    ExprPtr e = make(ExprKind::kCondExpr, first);
    TERN_ASSIGN_OR_RETURN(ExprPtr test, parse_or());
    ExprPtr otherwise;
    if (skip_name("else")) {
      TERN_ASSIGN_OR_RETURN(otherwise, parse_condexpr());
    }
    e->args.push_back(std::move(test));
    e->args.push_back(std::move(expr1));
    e->args.push_back(std::move(otherwise));
    TERN_ASSIGN_OR_RETURN(expr1, seal(std::move(e)));
  }
  return expr1;
}

Result<ExprPtr> ExpressionParser::parse_or() {
  const Token first = cur();
  TERN_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
  while (skip_name("or")) {
    TERN_ASSIGN_OR_RETURN(ExprPtr right, parse_and());
    ExprPtr e = make(ExprKind::kOr, first);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    TERN_ASSIGN_OR_RETURN(left, seal(std::move(e)));
  }
  return left;
}

Result<ExprPtr> ExpressionParser::parse_and() {
  const Token first = cur();
  TERN_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
  while (skip_name("and")) {
    TERN_ASSIGN_OR_RETURN(ExprPtr right, parse_not());
    ExprPtr e = make(ExprKind::kAnd, first);
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    TERN_ASSIGN_OR_RETURN(left, seal(std::move(e)));
  }
  return left;
}

Result<ExprPtr> ExpressionParser::parse_not() {
  if (at_name("not")) {
    DepthGuard guard(depth_);
    TERN_RETURN_IF_ERROR(check_depth());
    ExprPtr e = make(ExprKind::kNot, cur());
    next();
    TERN_ASSIGN_OR_RETURN(e->target, parse_not());
    return seal(std::move(e));
  }
  return parse_compare();
}

Result<ExprPtr> ExpressionParser::parse_compare() {
  const Token first = cur();
  TERN_ASSIGN_OR_RETURN(ExprPtr expr, parse_math1());
  ExprPtr cmp;
  while (true) {
    CompareOp op;
    if (at_op("==")) {
      op = CompareOp::kEq;
    } else if (at_op("!=")) {
      op = CompareOp::kNe;
    } else if (at_op("<")) {
      op = CompareOp::kLt;
    } else if (at_op("<=")) {
      op = CompareOp::kLe;
    } else if (at_op(">")) {
      op = CompareOp::kGt;
    } else if (at_op(">=")) {
      op = CompareOp::kGe;
    } else if (at_name("in")) {
      op = CompareOp::kIn;
    } else if (at_name("not") && look().kind == TokenKind::kName && look().text == "in") {
      op = CompareOp::kNotIn;
      next();
    } else {
      break;
    }
    next();
    if (!cmp) {
      cmp = make(ExprKind::kCompare, first);
      cmp->target = std::move(expr);
    }
    cmp->compare_ops.push_back(op);
    TERN_ASSIGN_OR_RETURN(ExprPtr operand, parse_math1());
    cmp->args.push_back(std::move(operand));
  }
  if (!cmp) return expr;
  return seal(std::move(cmp));
}

Result<ExprPtr> ExpressionParser::binary(const Token& at, BinaryOp op, ExprPtr left, ExprPtr right) {
  ExprPtr e = make(ExprKind::kBinary, at);
  e->op = op;
  e->args.push_back(std::move(left));
  e->args.push_back(std::move(right));
  return seal(std::move(e));
}

Result<ExprPtr> ExpressionParser::parse_math1() {
  const Token first = cur();
  TERN_ASSIGN_OR_RETURN(ExprPtr left, parse_concat());
  while (at_op("+") || at_op("-")) {
    BinaryOp op = at_op("+") ? BinaryOp::kAdd : BinaryOp::kSub;
    next();
    TERN_ASSIGN_OR_RETURN(ExprPtr right, parse_concat());
    TERN_ASSIGN_OR_RETURN(left, binary(first, op, std::move(left), std::move(right)));
  }
  return left;
}

Result<ExprPtr> ExpressionParser::parse_concat() {
  const Token first = cur();
  TERN_ASSIGN_OR_RETURN(ExprPtr left, parse_math2());
  if (!at_op("~")) return left;
  ExprPtr e = make(ExprKind::kConcat, first);
  e->args.push_back(std::move(left));
  while (skip_op("~")) {
    TERN_ASSIGN_OR_RETURN(ExprPtr right, parse_math2());
    e->args.push_back(std::move(right));
  }
  return seal(std::move(e));
}

Result<ExprPtr> ExpressionParser::parse_math2() {
  const Token first = cur();
  TERN_ASSIGN_OR_RETURN(ExprPtr left, parse_pow());
  while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
    BinaryOp op = at_op("*")    ? BinaryOp::kMul
                  : at_op("/")  ? BinaryOp::kDiv
                  : at_op("//") ? BinaryOp::kFloorDiv
                                : BinaryOp::kMod;
    next();
    TERN_ASSIGN_OR_RETURN(ExprPtr right, parse_pow());
    TERN_ASSIGN_OR_RETURN(left, binary(first, op, std::move(left), std::move(right)));
  }
  return left;
}

Result<ExprPtr> ExpressionParser::parse_pow() {
  const Token first = cur();
  TERN_ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
  while (skip_op("**")) {
    TERN_ASSIGN_OR_RETURN(ExprPtr right, parse_unary(true));
    TERN_ASSIGN_OR_RETURN(left, binary(first, BinaryOp::kPow, std::move(left), std::move(right)));
  }
  return left;
}

Result<ExprPtr> ExpressionParser::parse_unary(bool with_filter) {
  DepthGuard guard(depth_);
  TERN_RETURN_IF_ERROR(check_depth());
  ExprPtr node;
  if (at_op("-") || at_op("+")) {
    node = make(at_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur());
    next();
    TERN_ASSIGN_OR_RETURN(node->target, parse_unary(false));
    TERN_ASSIGN_OR_RETURN(node, seal(std::move(node)));
  } else {
    TERN_ASSIGN_OR_RETURN(node, parse_primary());
  }
  TERN_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
  if (with_filter) {
    TERN_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
  }
  return node;
}

Result<ExprPtr> ExpressionParser::parse_primary() {
  const Token t = cur();
  switch (t.kind) {
    case TokenKind::kName: {
      next();
      ExprPtr e = make(ExprKind::kConst, t);
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        e->value = JinjaValue::boolean(t.text == "true" || t.text == "True");
      } else if (t.text == "none" || t.text == "None") {
        e->value = JinjaValue::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.text;
        if (!macro_flags_.empty()) {
          if (t.text == "varargs") macro_flags_.back().first = true;
          if (t.text == "kwargs") macro_flags_.back().second = true;
        }
      }
      return e;
    }
    case TokenKind::kString: {
      std::string s;
      while (cur().kind == TokenKind::kString) {
        s += cur().text;
        next();
      }
      ExprPtr e = make(ExprKind::kConst, t);
      e->value = JinjaValue::string(std::move(s));
      return e;
    }
    case TokenKind::kInteger:
    case TokenKind::kFloat: {
      next();
      ExprPtr e = make(ExprKind::kConst, t);
      e->value = t.kind == TokenKind::kInteger ? JinjaValue::integer(t.int_value) : JinjaValue::number(t.float_value);
      return e;
    }
    case TokenKind::kOperator:
      if (t.text == "(") {
        next();
        TERN_ASSIGN_OR_RETURN(ExprPtr e, parse_tuple(true, {}, true));
        TERN_RETURN_IF_ERROR(expect_op(")"));
        return e;
      }
      if (t.text == "[") return parse_list();
      if (t.text == "{") return parse_dict();
      break;
    default:
      break;
  }
  return fail(t, "unexpected " + describe(t));
}

Result<ExprPtr> ExpressionParser::parse_list() {
  ExprPtr e = make(ExprKind::kList, cur());
  next();
  while (!at_op("]")) {
    if (!e->args.empty()) TERN_RETURN_IF_ERROR(expect_op(","));
    if (at_op("]")) break;
    TERN_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(true));
    e->args.push_back(std::move(item));
  }
  TERN_RETURN_IF_ERROR(expect_op("]"));
  return seal(std::move(e));
}

Result<ExprPtr> ExpressionParser::parse_dict() {
  ExprPtr e = make(ExprKind::kDict, cur());
  next();
  while (!at_op("}")) {
    if (!e->args.empty()) TERN_RETURN_IF_ERROR(expect_op(","));
    if (at_op("}")) break;
    TERN_ASSIGN_OR_RETURN(ExprPtr key, parse_expression(true));
    TERN_RETURN_IF_ERROR(expect_op(":"));
    TERN_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
    e->args.push_back(std::move(key));
    e->args.push_back(std::move(value));
  }
  TERN_RETURN_IF_ERROR(expect_op("}"));
  return seal(std::move(e));
}

Result<ExprPtr> ExpressionParser::parse_postfix(ExprPtr node) {
  while (true) {
    if (at_op(".") || at_op("[")) {
      TERN_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
    } else if (at_op("(")) {
      TERN_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> ExpressionParser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (at_op("|")) {
      TERN_ASSIGN_OR_RETURN(node, parse_filter(std::move(node), false));
    } else if (at_name("is")) {
      TERN_ASSIGN_OR_RETURN(node, parse_test(std::move(node)));
    } else if (at_op("(")) {
      TERN_ASSIGN_OR_RETURN(node, parse_call(std::move(node)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> ExpressionParser::parse_subscript(ExprPtr node) {
  const Token t = cur();
  next();
  if (t.text == ".") {
    const Token attr = cur();
    next();
    if (attr.kind == TokenKind::kName) {
      ExprPtr e = make(ExprKind::kGetattr, t);
      e->target = std::move(node);
      e->name = attr.text;
      return seal(std::move(e));
    }
    if (attr.kind != TokenKind::kInteger) return fail(attr, "expected name or number");
    ExprPtr key = make(ExprKind::kConst, attr);
    key->value = JinjaValue::integer(attr.int_value);
    ExprPtr e = make(ExprKind::kGetitem, t);
    e->target = std::move(node);
    e->args.push_back(std::move(key));
    return seal(std::move(e));
  }
  std::vector<ExprPtr> args;
  while (!at_op("]")) {
    if (!args.empty()) TERN_RETURN_IF_ERROR(expect_op(","));
    TERN_ASSIGN_OR_RETURN(ExprPtr a, parse_subscribed());
    args.push_back(std::move(a));
  }
  TERN_RETURN_IF_ERROR(expect_op("]"));
  if (args.empty()) return fail(t, "expected subscript expression");
  ExprPtr e = make(ExprKind::kGetitem, t);
  e->target = std::move(node);
  if (args.size() == 1) {
    e->args.push_back(std::move(args[0]));
  } else {
    ExprPtr tuple = make(ExprKind::kTuple, t);
    tuple->args = std::move(args);
    TERN_ASSIGN_OR_RETURN(tuple, seal(std::move(tuple)));
    e->args.push_back(std::move(tuple));
  }
  return seal(std::move(e));
}

Result<ExprPtr> ExpressionParser::parse_subscribed() {
  const Token first = cur();
  std::vector<ExprPtr> args;
  if (at_op(":")) {
    next();
    args.push_back(nullptr);
  } else {
    TERN_ASSIGN_OR_RETURN(ExprPtr node, parse_expression(true));
    if (!at_op(":")) return node;
    next();
    args.push_back(std::move(node));
  }
  if (at_op(":")) {
    args.push_back(nullptr);
  } else if (!at_op("]") && !at_op(",")) {
    TERN_ASSIGN_OR_RETURN(ExprPtr stop, parse_expression(true));
    args.push_back(std::move(stop));
  } else {
    args.push_back(nullptr);
  }
  if (skip_op(":")) {
    if (!at_op("]") && !at_op(",")) {
      TERN_ASSIGN_OR_RETURN(ExprPtr step, parse_expression(true));
      args.push_back(std::move(step));
    } else {
      args.push_back(nullptr);
    }
  } else {
    args.push_back(nullptr);
  }
  ExprPtr e = make(ExprKind::kSlice, first);
  e->args = std::move(args);
  return seal(std::move(e));
}

Status ExpressionParser::parse_call_args(Expr& e) {
  const Token open = cur();
  TERN_RETURN_IF_ERROR(expect_op("("));
  bool require_comma = false;
  while (!at_op(")")) {
    if (require_comma) {
      TERN_RETURN_IF_ERROR(expect_op(","));
      if (at_op(")")) break;
    }
    if (at_op("*") || at_op("**")) {
      return fail(cur(), "*args and **kwargs in calls are not supported", ErrorCode::kUnsupported);
    }
    if (cur().kind == TokenKind::kName && look().kind == TokenKind::kOperator && look().text == "=") {
      std::string key = cur().text;
      next();
      next();
      TERN_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      e.kwargs.push_back(Keyword{std::move(key), std::move(value)});
    } else {
      if (!e.kwargs.empty()) return fail(open, "invalid syntax for function call expression");
      TERN_ASSIGN_OR_RETURN(ExprPtr value, parse_expression(true));
      e.args.push_back(std::move(value));
    }
    require_comma = true;
  }
  return expect_op(")");
}

Result<ExprPtr> ExpressionParser::parse_call(ExprPtr node) {
  ExprPtr e = make(ExprKind::kCall, cur());
  e->line = node->line;  // errors point at the callee, not at '('
  e->column = node->column;
  e->target = std::move(node);
  TERN_RETURN_IF_ERROR(parse_call_args(*e));
  return seal(std::move(e));
}

Result<std::string> ExpressionParser::dotted_name() {
  TERN_ASSIGN_OR_RETURN(std::string name, expect_name());
  while (skip_op(".")) {
    TERN_ASSIGN_OR_RETURN(std::string part, expect_name());
    name += "." + part;
  }
  return name;
}

Result<ExprPtr> ExpressionParser::parse_filter(ExprPtr node, bool start_inline) {
  while (at_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    const Token t = cur();
    TERN_ASSIGN_OR_RETURN(std::string name, dotted_name());
    Support support = filter_support(name);
    if (support == Support::kUnsupported) return fail(t, "unsupported filter '" + name + "'", ErrorCode::kUnsupported);
    if (support == Support::kUnknown) return fail(t, "unknown filter '" + name + "'", ErrorCode::kUnsupported);
    ExprPtr e = make(ExprKind::kFilter, t);
    e->target = std::move(node);
    e->name = std::move(name);
    if (at_op("(")) TERN_RETURN_IF_ERROR(parse_call_args(*e));
    TERN_ASSIGN_OR_RETURN(node, seal(std::move(e)));
  }
  return node;
}

Result<ExprPtr> ExpressionParser::parse_test(ExprPtr node) {
  const Token is_token = cur();
  next();
  bool negated = skip_name("not");
  const Token t = cur();
  TERN_ASSIGN_OR_RETURN(std::string name, dotted_name());
  if (test_support(name) != Support::kSupported) return fail(t, "unknown test '" + name + "'", ErrorCode::kUnsupported);
  ExprPtr e = make(ExprKind::kTest, is_token);
  e->target = std::move(node);
  e->name = std::move(name);
  const Token& c = cur();
  bool arg_start = c.kind == TokenKind::kName || c.kind == TokenKind::kString || c.kind == TokenKind::kInteger ||
                   c.kind == TokenKind::kFloat || at_op("[") || at_op("{");
  if (at_op("(")) {
    TERN_RETURN_IF_ERROR(parse_call_args(*e));
  } else if (arg_start && !at_name("else") && !at_name("or") && !at_name("and")) {
    if (at_name("is")) return fail(c, "You cannot chain multiple tests with is");
    TERN_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
    TERN_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
    e->args.push_back(std::move(arg));
  }
  TERN_ASSIGN_OR_RETURN(e, seal(std::move(e)));
  if (!negated) return e;
  ExprPtr n = make(ExprKind::kNot, is_token);
  n->target = std::move(e);
  return seal(std::move(n));
}

std::vector<Token> tokens_;
size_t pos_ = 0;
uint32_t depth_ = 0;
int loop_depth_ = 0;
std::vector<std::pair<bool, bool>> macro_flags_;  // (reads varargs, reads kwargs) per open macro

}  // namespace tern::jinja
