// JinjaValue: the dynamically typed value of the chat-template engine, with
// Python's data model (None, bool, int, float, str, list/tuple, insertion-
// ordered dict) plus jinja2's Undefined, namespace() objects and callables.
// Values are cheap to copy: strings and containers are shared and immutable
// (jinja2's ImmutableSandboxedEnvironment forbids mutation); only a namespace
// is mutable, through `{% set ns.attr = ... %}`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tern {

struct JinjaList;
class JinjaDict;
struct JinjaNamespace;
namespace jinja {
struct Callable;  // defined by the interpreter: macros, built-ins, bound methods
}

// Containers deeper than this are refused (render error), so printing,
// comparing and destroying values never recurses without bound.
inline constexpr uint32_t kJinjaMaxNesting = 256;

class JinjaValue {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  JinjaValue() = default;  // undefined
  // `hint` names what was missing, for the "'x' is undefined" error.
  static JinjaValue undefined(std::string hint = {});
  static JinjaValue none();
  static JinjaValue boolean(bool b);
  static JinjaValue integer(int64_t i);
  static JinjaValue number(double d);
  static JinjaValue string(std::string s);
  static JinjaValue list(std::vector<JinjaValue> items, bool is_tuple = false);
  // What map/select/unique/items/reverse return in jinja2: a one-shot
  // iterator that is always truthy and has no len().
  static JinjaValue iterator(std::vector<JinjaValue> items);
  static JinjaValue dict(JinjaDict d);
  static JinjaValue new_namespace(JinjaDict attrs);
  static JinjaValue callable(std::shared_ptr<const jinja::Callable> fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  // Python numbers: bool, int and float.
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_integral() const { return kind_ == Kind::kBool || kind_ == Kind::kInt; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }  // bool and int
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(i_); }
  const std::string& as_string() const;  // string, or the hint of an undefined
  const JinjaList& as_list() const;
  const JinjaDict& as_dict() const;
  JinjaDict& namespace_attrs() const;  // the one mutable kind
  const jinja::Callable& as_callable() const;
  const std::shared_ptr<void>& shared() const { return p_; }

  // Python truthiness: 0, 0.0, "", [], {}, None and undefined are false.
  bool truthy() const;
  // Container nesting (0 for scalars; a namespace counts as 1).
  uint32_t depth() const;
  // Rough cost of building or walking the whole value (4 per container
  // element, 1 per 4 string bytes), charged to the render's work budget so
  // that the budget also bounds the memory a render can allocate.
  double weight() const;
  // Python's type name: 'str', 'int', 'list', 'dict', 'NoneType', ...
  std::string_view type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  int64_t i_ = 0;  // bool, int; depth of a list or dict
  double f_ = 0;   // float; weight of a list or dict
  std::shared_ptr<void> p_;
};

struct JinjaList {
  std::vector<JinjaValue> items;
  bool is_tuple = false;
  bool is_iterator = false;
};

// Insertion-ordered dict with Python key equality (1 == 1.0 == True).
class JinjaDict {
 public:
  const JinjaValue* find(const JinjaValue& key) const;
  const JinjaValue* find(std::string_view key) const;
  // Overwriting keeps the key's first position, as Python does.
  void set(JinjaValue key, JinjaValue value);
  void set(std::string key, JinjaValue value);
  // Appends a key known to be absent (no lookup); for building fixed shapes.
  void append_new(JinjaValue key, JinjaValue value);
  void reserve(size_t n) { items_.reserve(n); }
  const std::vector<std::pair<JinjaValue, JinjaValue>>& items() const { return items_; }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  void clear();
  uint32_t depth() const;  // 1 + deepest value
  double weight() const;

 private:
  // Small dicts (messages, loop) are searched linearly; past kIndexFrom
  // entries string keys get a hash index.
  static constexpr size_t kIndexFrom = 16;
  size_t find_string(std::string_view key) const;
  void build_index();

  std::vector<std::pair<JinjaValue, JinjaValue>> items_;
  std::unordered_map<std::string, size_t> string_index_;
};

struct JinjaNamespace {
  JinjaDict attrs;
};

}  // namespace tern
