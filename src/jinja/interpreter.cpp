// Evaluation of compiled chat templates (see interpreter.h). Errors
// carry the line and column of the innermost expression or statement that
// failed; every step charges the work budget so no template can hang.
#include "jinja/interpreter.h"

#include <array>
#include <cmath>
#include <ctime>
#include <iterator>

#include "base/depth_guard.h"
#include "jinja/filters.h"
#include "jinja/lexer.h"
#include "jinja/ops.h"

namespace tern::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE
constexpr std::string_view kErrorPrefix = "chat template line ";
constexpr std::string_view kBuiltins[] = {"range",        "dict",   "namespace", "raise_exception",
                                          "strftime_now", "lipsum", "cycler",    "joiner"};

constexpr std::array<std::string_view, 13> kLoopKeys = {"index",    "index0", "revindex", "revindex0", "first",
                                                        "last",     "length", "depth",    "depth0",    "previtem",
                                                        "nextitem", "cycle",  "changed"};

Status type_error(std::string m) { return invalid_argument(std::move(m)); }

JinjaValue builtin(std::string_view name) {
  auto fn = std::make_shared<Callable>();
  fn->kind = Callable::Kind::kBuiltin;
  fn->name = std::string(name);
  return JinjaValue::callable(std::move(fn));
}

Status check_nesting(const JinjaValue& v) {
  if (v.depth() > kJinjaMaxNesting) {
    return out_of_range("value nested deeper than " + std::to_string(kJinjaMaxNesting) + " levels");
  }
  return Status::ok();
}

}  // namespace

Interpreter::~Interpreter() {
  // Namespaces and macro scopes can reference themselves; empty them so the
  // shared pointers are freed.
  for (const JinjaValue& ns : namespaces_) ns.namespace_attrs().clear();
  for (const auto& scope : macro_scopes_) scope->vars.clear();
}

Result<std::string> Interpreter::render(const Program& program, const JinjaValue& context) {
  context_ = context;
  ScopePtr root = new_scope(nullptr, program.root_undefined);
  std::string out;
  Status st = exec_body(program.body, root, out);
  root->vars.clear();
  if (!st.is_ok()) return st;
  return out;
}

Status Interpreter::charge(double units) { return budget_.charge(units); }

Interpreter::ScopePtr Interpreter::new_scope(const ScopePtr& parent,
                                             const std::vector<std::string>& undefined_names) const {
  auto scope = std::make_shared<Scope>();
  scope->parent = parent;
  for (const std::string& name : undefined_names) {
    scope->vars[name] = JinjaValue::undefined("'" + name + "' is undefined");
  }
  return scope;
}

Status Interpreter::located(const Status& s, uint32_t line, uint32_t column) const {
  if (s.is_ok() || s.message().rfind(kErrorPrefix, 0) == 0) return s;
  return template_error(s.code(), line, column, s.message());
}

Status Interpreter::append(std::string& out, std::string_view text) {
  TERN_RETURN_IF_ERROR(charge(1 + static_cast<double>(text.size()) / 4));
  if (out.size() + text.size() > limits_.max_output_bytes) {
    return out_of_range("rendered chat template is larger than " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  out.append(text);
  return Status::ok();
}

JinjaValue Interpreter::lookup(const std::string& name, const Scope& scope) const {
  for (const Scope* s = &scope; s != nullptr; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (context_.is_dict()) {
    const JinjaValue* v = context_.as_dict().find(std::string_view(name));
    if (v != nullptr) return *v;
  }
  for (std::string_view b : kBuiltins) {
    if (b == name) return builtin(b);
  }
  return JinjaValue::undefined("'" + name + "' is undefined");
}

// ---- statements ----

Status Interpreter::exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const StmtPtr& s : body) {
    TERN_RETURN_IF_ERROR(exec(*s, scope, out));
    if (flow_ != Flow::kNormal) break;
  }
  return Status::ok();
}

Status Interpreter::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  DepthGuard guard(depth_);
  if (depth_ > limits_.max_depth) return located(out_of_range("template recursion too deep"), s.line, s.column);
  Status st = charge(1);
  if (!st.is_ok()) return located(st, s.line, s.column);
  switch (s.kind) {
    case StmtKind::kData:
      return located(append(out, s.text), s.line, s.column);
    case StmtKind::kOutput: {
      TERN_ASSIGN_OR_RETURN(JinjaValue v, eval(*s.expr, scope));
      if (v.is_string()) return located(append(out, v.as_string()), s.line, s.column);
      TERN_RETURN_IF_ERROR(located(charge(v.weight()), s.line, s.column));
      return located(append(out, to_str(v)), s.line, s.column);
    }
    case StmtKind::kIf:
      for (const IfBranch& b : s.branches) {
        TERN_ASSIGN_OR_RETURN(JinjaValue test, eval(*b.test, scope));
        if (test.truthy()) return exec_body(b.body, scope, out);
      }
      return exec_body(s.else_body, scope, out);
    case StmtKind::kFor:
      return exec_for(s, scope, out);
    case StmtKind::kSet: {
      TERN_ASSIGN_OR_RETURN(JinjaValue v, eval(*s.expr, scope));
      return located(assign(s.target, v, *scope), s.line, s.column);
    }
    case StmtKind::kSetBlock: {
      ScopePtr inner = new_scope(scope, s.frame_undefined);
      std::string text;
      TERN_RETURN_IF_ERROR(exec_body(s.body, inner, text));
      JinjaValue v = JinjaValue::string(std::move(text));
      if (s.filter) {
        TERN_ASSIGN_OR_RETURN(v, eval_filter(*s.filter, scope, &v));
      }
      return located(assign(s.target, v, *scope), s.line, s.column);
    }
    case StmtKind::kMacro: {
      auto fn = std::make_shared<Callable>();
      fn->kind = Callable::Kind::kMacro;
      fn->name = s.name;
      fn->macro = &s;
      fn->closure = scope;
      scope->vars[s.name] = JinjaValue::callable(std::move(fn));
      macro_scopes_.push_back(scope);
      return Status::ok();
    }
    case StmtKind::kBreak:
      flow_ = Flow::kBreak;
      return Status::ok();
    case StmtKind::kContinue:
      flow_ = Flow::kContinue;
      return Status::ok();
    case StmtKind::kWith: {
      ScopePtr inner = new_scope(scope, s.frame_undefined);
      std::vector<JinjaValue> values;
      for (const auto& [target, expr] : s.assignments) {
        TERN_ASSIGN_OR_RETURN(JinjaValue v, eval(*expr, scope));
        values.push_back(std::move(v));
      }
      for (size_t i = 0; i < values.size(); ++i) {
        TERN_RETURN_IF_ERROR(located(assign(s.assignments[i].first, values[i], *inner), s.line, s.column));
      }
      return exec_body(s.body, inner, out);
    }
    case StmtKind::kFilterBlock: {
      ScopePtr inner = new_scope(scope, s.frame_undefined);
      std::string text;
      TERN_RETURN_IF_ERROR(exec_body(s.body, inner, text));
      JinjaValue v = JinjaValue::string(std::move(text));
      TERN_ASSIGN_OR_RETURN(v, eval_filter(*s.filter, scope, &v));
      return located(append(out, to_str(v)), s.line, s.column);
    }
    case StmtKind::kScope:
      return exec_body(s.body, scope, out);
  }
  return internal_error("unknown statement");
}

Status Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  TERN_ASSIGN_OR_RETURN(JinjaValue iterable, eval(*s.expr, scope));
  auto listed = iterate(iterable);
  if (!listed.is_ok()) return located(listed.status(), s.expr->line, s.expr->column);
  std::vector<JinjaValue> items = std::move(listed).value();
  if (s.filter) {
    std::vector<JinjaValue> kept;
    for (JinjaValue& item : items) {
      TERN_RETURN_IF_ERROR(located(charge(1), s.line, s.column));
      auto fs = std::make_shared<Scope>();
      fs->parent = scope;
      TERN_RETURN_IF_ERROR(located(assign(s.target, item, *fs), s.line, s.column));
      TERN_ASSIGN_OR_RETURN(JinjaValue keep, eval(*s.filter, fs));
      if (keep.truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const auto n = static_cast<int64_t>(items.size());
  std::vector<JinjaValue> keys;  // the loop object's keys, shared by every iteration
  keys.reserve(kLoopKeys.size());
  for (std::string_view k : kLoopKeys) keys.push_back(JinjaValue::string(std::string(k)));
  JinjaValue changed;  // loop.changed() remembers its last arguments across iterations
  if (n > 0) {
    auto fn = std::make_shared<Callable>();
    fn->kind = Callable::Kind::kLoopChanged;
    fn->name = "changed";
    fn->self = JinjaValue::new_namespace({});
    namespaces_.push_back(fn->self);
    changed = JinjaValue::callable(std::move(fn));
  }
  for (int64_t i = 0; i < n; ++i) {
    TERN_RETURN_IF_ERROR(located(charge(16), s.line, s.column));
    ScopePtr it = new_scope(scope, s.frame_undefined);
    JinjaDict loop;
    loop.reserve(kLoopKeys.size());
    const JinjaValue values[] = {
        JinjaValue::integer(i + 1),     JinjaValue::integer(i),      JinjaValue::integer(n - i),
        JinjaValue::integer(n - i - 1), JinjaValue::boolean(i == 0), JinjaValue::boolean(i == n - 1),
        JinjaValue::integer(n),         JinjaValue::integer(1),      JinjaValue::integer(0)};
    for (size_t k = 0; k < std::size(values); ++k) loop.append_new(keys[k], values[k]);
    if (i > 0) loop.append_new(keys[9], items[static_cast<size_t>(i - 1)]);
    if (i + 1 < n) loop.append_new(keys[10], items[static_cast<size_t>(i + 1)]);
    auto cycle = std::make_shared<Callable>();
    cycle->kind = Callable::Kind::kLoopCycle;
    cycle->name = "cycle";
    cycle->loop_index0 = i;
    loop.append_new(keys[11], JinjaValue::callable(std::move(cycle)));
    loop.append_new(keys[12], changed);
    it->vars["loop"] = JinjaValue::dict(std::move(loop));
    TERN_RETURN_IF_ERROR(located(assign(s.target, items[static_cast<size_t>(i)], *it), s.line, s.column));
    TERN_RETURN_IF_ERROR(exec_body(s.body, it, out));
    Flow f = flow_;
    flow_ = Flow::kNormal;
    if (f == Flow::kBreak) break;
  }
  if (n == 0 && !s.else_body.empty()) return exec_body(s.else_body, new_scope(scope, s.else_undefined), out);
  return Status::ok();
}

Status Interpreter::assign(const Target& t, const JinjaValue& value, Scope& scope) {
  switch (t.kind) {
    case Target::Kind::kName:
      scope.vars[t.name] = value;
      return Status::ok();
    case Target::Kind::kNamespaceAttr: {
      JinjaValue ns = lookup(t.name, scope);
      if (!ns.is_namespace()) {
        return template_error(ErrorCode::kInvalidArgument, t.line, t.column,
                              "cannot assign attribute on non-namespace object '" + t.name + "'");
      }
      TERN_RETURN_IF_ERROR(check_nesting(value));
      ns.namespace_attrs().set(std::string(t.attr), value);
      return Status::ok();
    }
    case Target::Kind::kTuple: {
      TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(value));
      if (items.size() > t.items.size()) {
        return invalid_argument("too many values to unpack (expected " + std::to_string(t.items.size()) + ")");
      }
      if (items.size() < t.items.size()) {
        return invalid_argument("not enough values to unpack (expected " + std::to_string(t.items.size()) + ", got " +
                                std::to_string(items.size()) + ")");
      }
      for (size_t i = 0; i < items.size(); ++i) TERN_RETURN_IF_ERROR(assign(t.items[i], items[i], scope));
      return Status::ok();
    }
  }
  return internal_error("unknown assignment target");
}

// ---- expressions ----

Result<JinjaValue> Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  DepthGuard guard(depth_);
  if (depth_ > limits_.max_depth) return located(out_of_range("template recursion too deep"), e.line, e.column);
  auto r = eval_inner(e, scope);
  if (!r.is_ok()) return located(r.status(), e.line, e.column);
  return r;
}

Result<CallArgs> Interpreter::eval_args(const Expr& e, const ScopePtr& scope) {
  CallArgs a;
  for (const ExprPtr& x : e.args) {
    TERN_ASSIGN_OR_RETURN(JinjaValue v, eval(*x, scope));
    a.args.push_back(std::move(v));
  }
  for (const Keyword& k : e.kwargs) {
    TERN_ASSIGN_OR_RETURN(JinjaValue v, eval(*k.value, scope));
    a.kwargs.emplace_back(k.name, std::move(v));
  }
  return a;
}

Result<JinjaValue> Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  TERN_RETURN_IF_ERROR(charge(1));
  const size_t max_size = limits_.max_output_bytes;
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName:
      return lookup(e.name, *scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<JinjaValue> items;
      items.reserve(e.args.size());
      for (const ExprPtr& x : e.args) {
        TERN_ASSIGN_OR_RETURN(JinjaValue v, eval(*x, scope));
        items.push_back(std::move(v));
      }
      JinjaValue l = JinjaValue::list(std::move(items), e.kind == ExprKind::kTuple);
      TERN_RETURN_IF_ERROR(check_nesting(l));
      return l;
    }
    case ExprKind::kDict: {
      JinjaDict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        TERN_ASSIGN_OR_RETURN(JinjaValue k, eval(*e.args[i], scope));
        TERN_ASSIGN_OR_RETURN(JinjaValue v, eval(*e.args[i + 1], scope));
        if (k.is_dict() || (k.is_list() && !k.as_list().is_tuple) || k.is_namespace()) {
          return type_error("unhashable type: '" + std::string(k.type_name()) + "'");
        }
        d.set(std::move(k), std::move(v));
      }
      JinjaValue dv = JinjaValue::dict(std::move(d));
      TERN_RETURN_IF_ERROR(check_nesting(dv));
      return dv;
    }
    case ExprKind::kGetattr: {
      TERN_ASSIGN_OR_RETURN(JinjaValue obj, eval(*e.target, scope));
      return get_attribute(obj, e.name);
    }
    case ExprKind::kGetitem: {
      TERN_ASSIGN_OR_RETURN(JinjaValue obj, eval(*e.target, scope));
      const Expr& index = *e.args[0];
      if (obj.is_string()) TERN_RETURN_IF_ERROR(charge(obj.weight()));
      if (index.kind == ExprKind::kSlice) {
        JinjaValue bounds[3];
        const JinjaValue* ptrs[3] = {nullptr, nullptr, nullptr};
        for (size_t i = 0; i < 3; ++i) {
          if (!index.args[i]) continue;
          TERN_ASSIGN_OR_RETURN(bounds[i], eval(*index.args[i], scope));
          ptrs[i] = &bounds[i];
        }
        TERN_RETURN_IF_ERROR(charge(obj.weight()));
        return get_slice(obj, ptrs[0], ptrs[1], ptrs[2]);
      }
      TERN_ASSIGN_OR_RETURN(JinjaValue key, eval(index, scope));
      return get_item(obj, key);
    }
    case ExprKind::kSlice:
      return internal_error("slice outside a subscript");
    case ExprKind::kCall:
      return eval_call(e, scope);
    case ExprKind::kFilter:
      return eval_filter(e, scope, nullptr);
    case ExprKind::kTest: {
      TERN_ASSIGN_OR_RETURN(JinjaValue subject, eval(*e.target, scope));
      TERN_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, scope));
      TERN_ASSIGN_OR_RETURN(bool r, apply_test(e.name, subject, args, budget_));
      return JinjaValue::boolean(r);
    }
    case ExprKind::kNot: {
      TERN_ASSIGN_OR_RETURN(JinjaValue v, eval(*e.target, scope));
      return JinjaValue::boolean(!v.truthy());
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      TERN_ASSIGN_OR_RETURN(JinjaValue v, eval(*e.target, scope));
      return e.kind == ExprKind::kNeg ? negate(v) : unary_plus(v);
    }
    case ExprKind::kBinary: {
      TERN_ASSIGN_OR_RETURN(JinjaValue a, eval(*e.args[0], scope));
      TERN_ASSIGN_OR_RETURN(JinjaValue b, eval(*e.args[1], scope));
      TERN_ASSIGN_OR_RETURN(JinjaValue r, binary_op(e.op, a, b, max_size));
      TERN_RETURN_IF_ERROR(charge(r.weight()));
      TERN_RETURN_IF_ERROR(check_nesting(r));
      return r;
    }
    case ExprKind::kConcat: {
      std::string s;
      for (const ExprPtr& x : e.args) {
        TERN_ASSIGN_OR_RETURN(JinjaValue v, eval(*x, scope));
        s += v.is_string() ? v.as_string() : to_str(v);
        if (s.size() > max_size) return out_of_range("string too large");
      }
      TERN_RETURN_IF_ERROR(charge(static_cast<double>(s.size()) / 4));
      return JinjaValue::string(std::move(s));
    }
    case ExprKind::kCompare:
      return eval_compare(e, scope);
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      TERN_ASSIGN_OR_RETURN(JinjaValue left, eval(*e.args[0], scope));
      if (left.truthy() == (e.kind == ExprKind::kOr)) return left;
      return eval(*e.args[1], scope);
    }
    case ExprKind::kCondExpr: {
      TERN_ASSIGN_OR_RETURN(JinjaValue test, eval(*e.args[0], scope));
      if (test.truthy()) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return JinjaValue::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                   " evaluated to false and no else section was defined.");
    }
  }
  return internal_error("unknown expression");
}

Result<JinjaValue> Interpreter::eval_compare(const Expr& e, const ScopePtr& scope) {
  TERN_ASSIGN_OR_RETURN(JinjaValue left, eval(*e.target, scope));
  for (size_t i = 0; i < e.args.size(); ++i) {
    TERN_ASSIGN_OR_RETURN(JinjaValue right, eval(*e.args[i], scope));
    TERN_RETURN_IF_ERROR(charge(left.weight() + right.weight()));
    bool r = false;
    switch (e.compare_ops[i]) {
      case CompareOp::kEq:
        r = py_equal(left, right);
        break;
      case CompareOp::kNe:
        r = !py_equal(left, right);
        break;
      case CompareOp::kIn:
      case CompareOp::kNotIn: {
        TERN_ASSIGN_OR_RETURN(bool in, py_contains(right, left));
        r = (e.compare_ops[i] == CompareOp::kIn) == in;
        break;
      }
      default: {
        static constexpr std::string_view kNames[] = {"==", "!=", "<", "<=", ">", ">="};
        CompareOp op = e.compare_ops[i];
        TERN_ASSIGN_OR_RETURN(int c, py_compare(left, right, kNames[static_cast<int>(op)]));
        r = op == CompareOp::kLt ? c < 0 : op == CompareOp::kLe ? c <= 0 : op == CompareOp::kGt ? c > 0 : c >= 0;
      }
    }
    if (!r) return JinjaValue::boolean(false);
    left = std::move(right);
  }
  return JinjaValue::boolean(true);
}

Result<JinjaValue> Interpreter::eval_filter(const Expr& e, const ScopePtr& scope, const JinjaValue* input) {
  JinjaValue subject;
  if (e.target == nullptr) {
    if (input == nullptr) return internal_error("filter without a subject");
    subject = *input;
  } else if (input != nullptr && e.target->kind == ExprKind::kFilter) {
    TERN_ASSIGN_OR_RETURN(subject, eval_filter(*e.target, scope, input));
  } else {
    TERN_ASSIGN_OR_RETURN(subject, eval(*e.target, scope));
  }
  TERN_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, scope));
  auto r = apply_filter(e.name, subject, args, budget_);
  if (!r.is_ok()) return located(r.status(), e.line, e.column);
  return r;
}

Result<JinjaValue> Interpreter::eval_call(const Expr& e, const ScopePtr& scope) {
  TERN_ASSIGN_OR_RETURN(JinjaValue fn, eval(*e.target, scope));
  TERN_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, scope));
  return call(fn, args);
}

Result<JinjaValue> Interpreter::call(const JinjaValue& fn, const CallArgs& args) {
  if (fn.is_undefined()) return invalid_argument(undefined_message(fn));
  if (!fn.is_callable()) return type_error("'" + std::string(fn.type_name()) + "' object is not callable");
  const Callable& c = fn.as_callable();
  switch (c.kind) {
    case Callable::Kind::kBuiltin:
      return call_builtin(c.name, args);
    case Callable::Kind::kMethod:
      return call_method(c.self, c.name, args, budget_);
    case Callable::Kind::kMacro:
      return call_macro(c, args);
    case Callable::Kind::kLoopCycle:
      if (args.args.empty()) return type_error("no items for cycling given");
      return args.args[static_cast<size_t>(c.loop_index0) % args.args.size()];
    case Callable::Kind::kLoopChanged: {
      JinjaValue value = JinjaValue::list(args.args, /*is_tuple=*/true);
      JinjaDict& state = c.self.namespace_attrs();
      const JinjaValue* last = state.find(std::string_view("last"));
      if (last != nullptr && py_equal(*last, value)) return JinjaValue::boolean(false);
      TERN_RETURN_IF_ERROR(check_nesting(value));
      state.set(std::string("last"), std::move(value));
      return JinjaValue::boolean(true);
    }
  }
  return internal_error("unknown callable");
}

Result<JinjaValue> Interpreter::call_builtin(const std::string& name, const CallArgs& args) {
  if (name == "raise_exception") {
    return invalid_argument(args.args.empty() ? std::string("raise_exception() called") : to_str(args.args[0]));
  }
  if (name == "range") {
    if (!args.kwargs.empty() || args.args.empty() || args.args.size() > 3) {
      return type_error("range expected 1 to 3 integer arguments");
    }
    for (const JinjaValue& a : args.args) {
      if (!a.is_integral())
        return type_error("'" + std::string(a.type_name()) + "' object cannot be interpreted as an integer");
    }
    int64_t start = args.args.size() == 1 ? 0 : args.args[0].as_int();
    int64_t stop = args.args.size() == 1 ? args.args[0].as_int() : args.args[1].as_int();
    int64_t step = args.args.size() == 3 ? args.args[2].as_int() : 1;
    if (step == 0) return invalid_argument("range() arg 3 must not be zero");
    double len = step > 0
                     ? std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step))
                     : std::ceil((static_cast<double>(start) - static_cast<double>(stop)) / -static_cast<double>(step));
    if (len > static_cast<double>(kMaxRange)) {
      return out_of_range("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    std::vector<JinjaValue> items;
    for (int64_t v = start; step > 0 ? v < stop : v > stop; v += step) items.push_back(JinjaValue::integer(v));
    TERN_RETURN_IF_ERROR(charge(static_cast<double>(items.size())));
    return JinjaValue::list(std::move(items));
  }
  if (name == "dict" || name == "namespace") {
    JinjaDict d;
    for (const JinjaValue& a : args.args) {
      if (!a.is_dict()) return type_error(name + "() positional arguments must be mappings");
      for (const auto& [k, v] : a.as_dict().items()) d.set(k, v);
    }
    for (const auto& [k, v] : args.kwargs) d.set(std::string(k), v);
    JinjaValue r = name == "dict" ? JinjaValue::dict(std::move(d)) : JinjaValue::new_namespace(std::move(d));
    if (name == "dict") {
      TERN_RETURN_IF_ERROR(check_nesting(r));
    } else {
      for (const auto& kv : r.namespace_attrs().items()) TERN_RETURN_IF_ERROR(check_nesting(kv.second));
      namespaces_.push_back(r);
    }
    TERN_RETURN_IF_ERROR(charge(r.weight()));
    return r;
  }
  if (name == "strftime_now") {
    if (args.args.size() != 1 || !args.args[0].is_string() || args.args[0].as_string().size() > 256) {
      return type_error("strftime_now() takes one format string");
    }
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[1024];
    size_t n = std::strftime(buf, sizeof(buf), args.args[0].as_string().c_str(), &local);
    return JinjaValue::string(std::string(buf, n));
  }
  return unsupported("the global function '" + name + "' is not supported");
}

Result<JinjaValue> Interpreter::call_macro(const Callable& c, const CallArgs& args) {
  const Stmt& m = *c.macro;
  if (macro_depth_ >= limits_.max_macro_depth) {
    return out_of_range("macro calls nested deeper than " + std::to_string(limits_.max_macro_depth));
  }
  if (args.args.size() > m.params.size() && !m.catch_varargs) {
    return type_error("macro '" + m.name + "' takes not more than " + std::to_string(m.params.size()) + " argument(s)");
  }
  ScopePtr ms = new_scope(c.closure, m.frame_undefined);
  std::vector<const JinjaValue*> bound(m.params.size(), nullptr);
  for (size_t i = 0; i < args.args.size() && i < m.params.size(); ++i) bound[i] = &args.args[i];
  JinjaDict extra_kwargs;
  for (const auto& [key, value] : args.kwargs) {
    size_t i = 0;
    while (i < m.params.size() && m.params[i].name != key) ++i;
    if (i < m.params.size()) {
      if (bound[i] != nullptr)
        return type_error("macro '" + m.name + "' got multiple values for argument '" + key + "'");
      bound[i] = &value;
    } else if (m.catch_kwargs) {
      extra_kwargs.set(std::string(key), value);
    } else {
      return type_error("macro '" + m.name + "' takes no keyword argument '" + key + "'");
    }
  }
  for (size_t i = 0; i < m.params.size(); ++i) {
    const MacroParam& p = m.params[i];
    if (bound[i] != nullptr) {
      ms->vars[p.name] = *bound[i];
    } else if (p.default_value) {
      TERN_ASSIGN_OR_RETURN(JinjaValue v, eval(*p.default_value, ms));
      ms->vars[p.name] = std::move(v);
    } else {
      ms->vars[p.name] = JinjaValue::undefined("parameter '" + p.name + "' was not provided");
    }
  }
  if (m.catch_varargs) {
    std::vector<JinjaValue> rest;
    for (size_t i = m.params.size(); i < args.args.size(); ++i) rest.push_back(args.args[i]);
    ms->vars["varargs"] = JinjaValue::list(std::move(rest), true);
  }
  if (m.catch_kwargs) ms->vars["kwargs"] = JinjaValue::dict(std::move(extra_kwargs));
  std::string out;
  ++macro_depth_;
  Status st = exec_body(m.body, ms, out);
  --macro_depth_;
  flow_ = Flow::kNormal;
  ms->vars.clear();
  if (!st.is_ok()) return st;
  return JinjaValue::string(std::move(out));
}

}  // namespace tern::jinja
