// JinjaValue construction, truthiness and the ordered dict. Python
// semantics of operators on values live in ops.cpp.
#include "jinja/value.h"

#include <algorithm>
#include <cassert>

namespace tern {
namespace {

const std::string& empty_string() {
  static const std::string kEmpty;
  return kEmpty;
}

// Python hashes 1, 1.0 and True alike; strings are indexed separately.
bool key_equal(const JinjaValue& a, const JinjaValue& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.is_none() && b.is_none()) return true;
  if (a.is_list() && b.is_list()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!key_equal(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  return false;
}

}  // namespace

JinjaValue JinjaValue::undefined(std::string hint) {
  JinjaValue v;
  if (!hint.empty()) v.p_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

JinjaValue JinjaValue::none() {
  JinjaValue v;
  v.kind_ = Kind::kNone;
  return v;
}

JinjaValue JinjaValue::boolean(bool b) {
  JinjaValue v;
  v.kind_ = Kind::kBool;
  v.i_ = b ? 1 : 0;
  return v;
}

JinjaValue JinjaValue::integer(int64_t i) {
  JinjaValue v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

JinjaValue JinjaValue::number(double d) {
  JinjaValue v;
  v.kind_ = Kind::kFloat;
  v.f_ = d;
  return v;
}

JinjaValue JinjaValue::string(std::string s) {
  JinjaValue v;
  v.kind_ = Kind::kString;
  v.p_ = std::make_shared<std::string>(std::move(s));
  return v;
}

JinjaValue JinjaValue::list(std::vector<JinjaValue> items, bool is_tuple) {
  auto l = std::make_shared<JinjaList>();
  uint32_t depth = 0;
  double weight = 4;
  for (const JinjaValue& item : items) {
    depth = std::max(depth, item.depth());
    weight += item.weight();
  }
  l->items = std::move(items);
  l->is_tuple = is_tuple;
  JinjaValue v;
  v.kind_ = Kind::kList;
  v.i_ = depth + 1;
  v.f_ = weight;
  v.p_ = std::move(l);
  return v;
}

JinjaValue JinjaValue::iterator(std::vector<JinjaValue> items) {
  JinjaValue v = list(std::move(items));
  static_cast<JinjaList*>(v.p_.get())->is_iterator = true;
  return v;
}

JinjaValue JinjaValue::dict(JinjaDict d) {
  JinjaValue v;
  v.kind_ = Kind::kDict;
  v.i_ = d.depth();
  v.f_ = d.weight();
  v.p_ = std::make_shared<JinjaDict>(std::move(d));
  return v;
}

JinjaValue JinjaValue::new_namespace(JinjaDict attrs) {
  auto ns = std::make_shared<JinjaNamespace>();
  ns->attrs = std::move(attrs);
  JinjaValue v;
  v.kind_ = Kind::kNamespace;
  v.p_ = std::move(ns);
  return v;
}

JinjaValue JinjaValue::callable(std::shared_ptr<const jinja::Callable> fn) {
  JinjaValue v;
  v.kind_ = Kind::kCallable;
  v.p_ = std::const_pointer_cast<jinja::Callable>(std::move(fn));
  return v;
}

const std::string& JinjaValue::as_string() const {
  if ((kind_ == Kind::kString || kind_ == Kind::kUndefined) && p_) return *static_cast<const std::string*>(p_.get());
  return empty_string();
}

const JinjaList& JinjaValue::as_list() const {
  assert(kind_ == Kind::kList);
  return *static_cast<const JinjaList*>(p_.get());
}

const JinjaDict& JinjaValue::as_dict() const {
  assert(kind_ == Kind::kDict);
  return *static_cast<const JinjaDict*>(p_.get());
}

JinjaDict& JinjaValue::namespace_attrs() const {
  assert(kind_ == Kind::kNamespace);
  return static_cast<JinjaNamespace*>(p_.get())->attrs;
}

const jinja::Callable& JinjaValue::as_callable() const {
  assert(kind_ == Kind::kCallable);
  return *static_cast<const jinja::Callable*>(p_.get());
}

bool JinjaValue::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return as_list().is_iterator || !as_list().items.empty();
    case Kind::kDict:
      return !as_dict().empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

uint32_t JinjaValue::depth() const {
  switch (kind_) {
    case Kind::kList:
    case Kind::kDict:
      return static_cast<uint32_t>(i_);
    case Kind::kNamespace:
      return 1;
    default:
      return 0;
  }
}

double JinjaValue::weight() const {
  switch (kind_) {
    case Kind::kList:
    case Kind::kDict:
      return f_;
    case Kind::kString:
      return 1 + static_cast<double>(as_string().size()) / 4;
    default:
      return 1;
  }
}

std::string_view JinjaValue::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return as_list().is_iterator ? "generator" : as_list().is_tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

size_t JinjaDict::find_string(std::string_view key) const {
  if (items_.size() > kIndexFrom) {
    auto it = string_index_.find(std::string(key));
    return it == string_index_.end() ? items_.size() : it->second;
  }
  for (size_t i = 0; i < items_.size(); ++i) {
    const JinjaValue& k = items_[i].first;
    if (k.is_string() && k.as_string() == key) return i;
  }
  return items_.size();
}

void JinjaDict::build_index() {
  string_index_.clear();
  for (size_t i = 0; i < items_.size(); ++i) {
    if (items_[i].first.is_string()) string_index_.emplace(items_[i].first.as_string(), i);
  }
}

const JinjaValue* JinjaDict::find(std::string_view key) const {
  size_t i = find_string(key);
  return i == items_.size() ? nullptr : &items_[i].second;
}

const JinjaValue* JinjaDict::find(const JinjaValue& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : items_) {
    if (!k.is_string() && key_equal(k, key)) return &v;
  }
  return nullptr;
}

void JinjaDict::set(std::string key, JinjaValue value) {
  size_t i = find_string(key);
  if (i < items_.size()) {
    items_[i].second = std::move(value);
    return;
  }
  if (items_.size() > kIndexFrom) string_index_.emplace(key, items_.size());
  items_.emplace_back(JinjaValue::string(std::move(key)), std::move(value));
  if (items_.size() == kIndexFrom + 1) build_index();
}

void JinjaDict::append_new(JinjaValue key, JinjaValue value) {
  if (items_.size() > kIndexFrom && key.is_string()) string_index_.emplace(key.as_string(), items_.size());
  items_.emplace_back(std::move(key), std::move(value));
  if (items_.size() == kIndexFrom + 1) build_index();
}

void JinjaDict::set(JinjaValue key, JinjaValue value) {
  if (key.is_string()) {
    set(std::string(key.as_string()), std::move(value));
    return;
  }
  for (auto& [k, v] : items_) {
    if (!k.is_string() && key_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
  if (items_.size() == kIndexFrom + 1) build_index();
}

void JinjaDict::clear() {
  items_.clear();
  string_index_.clear();
}

double JinjaDict::weight() const {
  double w = 4;
  for (const auto& [k, v] : items_) w += k.weight() + v.weight();
  return w;
}

uint32_t JinjaDict::depth() const {
  uint32_t d = 0;
  for (const auto& [k, v] : items_) d = std::max({d, k.depth(), v.depth()});
  return d + 1;
}

}  // namespace tern
