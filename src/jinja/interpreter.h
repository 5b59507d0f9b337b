// Tree-walking evaluator for a parsed chat template, with jinja2's runtime
// rules: scopes (a for-loop iteration and a macro call get fresh scopes, an
// if does not), the `loop` object, namespaces, macros and the globals
// transformers provides (raise_exception, strftime_now, namespace, range,
// dict). One Interpreter renders once, on one thread; every render is
// bounded in output size, work and recursion.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "jinja/ast.h"
#include "jinja/methods.h"
#include "jinja/value.h"

namespace tern {

// Bounds of one render. The defaults leave room for conversations of many
// megabytes while a hostile template still fails within about a second.
struct JinjaLimits {
  size_t max_output_bytes = 32u << 20;  // also bounds every string built (lists: this / 32 items)
  uint64_t max_work = 20'000'000;       // evaluation steps + string bytes / 4 + 4 per list item handled
  uint32_t max_depth = 400;             // nested statement/expression evaluation
  uint32_t max_macro_depth = 64;        // nested macro calls
};

namespace jinja {

// A variable scope. The root scope falls back to the render context, then
// to the globals.
struct Scope {
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, JinjaValue> vars;
};

class Interpreter {
 public:
  explicit Interpreter(const JinjaLimits& limits)
      : limits_(limits), budget_(limits.max_output_bytes, static_cast<double>(limits.max_work)) {}
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // `context` must be a dict (or undefined for none).
  Result<std::string> render(const Program& program, const JinjaValue& context);

 private:
  using ScopePtr = std::shared_ptr<Scope>;
  ScopePtr new_scope(const ScopePtr& parent, const std::vector<std::string>& undefined_names) const;
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };

  Status exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Status exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  Status exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
  Status assign(const Target& t, const JinjaValue& value, Scope& scope);
  Status append(std::string& out, std::string_view text);

  Result<JinjaValue> eval(const Expr& e, const ScopePtr& scope);
  Result<JinjaValue> eval_inner(const Expr& e, const ScopePtr& scope);
  Result<JinjaValue> eval_compare(const Expr& e, const ScopePtr& scope);
  Result<JinjaValue> eval_call(const Expr& e, const ScopePtr& scope);
  Result<JinjaValue> eval_filter(const Expr& e, const ScopePtr& scope, const JinjaValue* input);
  Result<CallArgs> eval_args(const Expr& e, const ScopePtr& scope);
  Result<JinjaValue> call(const JinjaValue& fn, const CallArgs& args);
  Result<JinjaValue> call_builtin(const std::string& name, const CallArgs& args);
  Result<JinjaValue> call_macro(const Callable& macro, const CallArgs& args);
  JinjaValue lookup(const std::string& name, const Scope& scope) const;

  Status charge(double units);
  Status located(const Status& s, uint32_t line, uint32_t column) const;

  JinjaLimits limits_;
  Budget budget_;
  JinjaValue context_;
  Flow flow_ = Flow::kNormal;
  uint32_t depth_ = 0;
  uint32_t macro_depth_ = 0;
  // Emptied after the render: namespaces and scopes holding macros can
  // reference themselves, which would leak their shared pointers.
  std::vector<JinjaValue> namespaces_;
  std::vector<std::shared_ptr<Scope>> macro_scopes_;
};

}  // namespace jinja
}  // namespace tern
