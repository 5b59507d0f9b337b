// Attribute and item access as jinja2's sandboxed environment does them
// (`m.role` tries the attribute, then m['role']; misses give Undefined),
// slicing, and the Python methods templates call on str, dict and list
// (strip, split, items, get, ...). Mutating methods are refused, as in
// jinja2's ImmutableSandboxedEnvironment.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "jinja/value.h"

namespace tern::jinja {

struct Stmt;
struct Scope;

// The render's bounds as filters and methods see them: the largest string
// they may build (lists: a 32nd of it) and the shared work counter, charged
// by every operation in proportion to the data it walks or builds.
class Budget {
 public:
  Budget(size_t max_size, double max_work) : max_size_(max_size), max_work_(max_work) {}
  size_t max_size() const { return max_size_; }
  size_t max_items() const { return max_size_ / 32; }
  Status charge(double units);

 private:
  size_t max_size_;
  double max_work_;
  double work_ = 0;
};

// Positional and keyword arguments of a call, filter or test.
struct CallArgs {
  std::vector<JinjaValue> args;
  std::vector<std::pair<std::string, JinjaValue>> kwargs;
};

// A value that can be called: a global function, a method bound to its
// object, a macro (with the scope it was defined in) or loop.cycle.
struct Callable {
  enum class Kind : uint8_t { kBuiltin, kMethod, kMacro, kLoopCycle, kLoopChanged };
  Kind kind = Kind::kBuiltin;
  std::string name;
  JinjaValue self;                 // kMethod: the bound object; kLoopChanged: a namespace holding the last value
  const Stmt* macro = nullptr;     // kMacro: owned by the compiled template
  std::shared_ptr<Scope> closure;  // kMacro
  int64_t loop_index0 = 0;         // kLoopCycle
};

// Binds positional and keyword arguments to parameter names like a Python
// signature; too many positionals or unknown keywords are TypeErrors.
class ArgBinder {
 public:
  static Result<ArgBinder> bind(const CallArgs& args, std::string_view function, std::vector<std::string_view> params);
  const JinjaValue* get(size_t i) const { return values_[i]; }  // null when not given
  size_t given() const;

 private:
  std::vector<const JinjaValue*> values_;
};

// `obj.name`. Errors only when obj is undefined.
Result<JinjaValue> get_attribute(const JinjaValue& obj, std::string_view name);
// `obj[key]`. Errors only when obj is undefined or a slice step is 0.
Result<JinjaValue> get_item(const JinjaValue& obj, const JinjaValue& key);
// `obj[start:stop:step]`; null pointers are omitted bounds.
Result<JinjaValue> get_slice(const JinjaValue& obj, const JinjaValue* start, const JinjaValue* stop,
                             const JinjaValue* step);

// Calls method `name` of `self` (a bound method from get_attribute).
Result<JinjaValue> call_method(const JinjaValue& self, std::string_view name, const CallArgs& args, Budget& budget);

}  // namespace tern::jinja
