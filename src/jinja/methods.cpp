// Attribute/item access and Python methods on template values (see
// methods.h). Misses give an Undefined carrying jinja2's message, so
// the error appears only if the template then uses the value.
#include "jinja/methods.h"

#include <algorithm>
#include <array>

#include "jinja/ops.h"
#include "jinja/text.h"

namespace tern::jinja {
namespace {

constexpr std::array<std::string_view, 25> kStrMethods = {
    "strip",   "lstrip",  "rstrip",  "startswith", "endswith", "split", "rsplit", "splitlines", "upper",
    "lower",   "replace", "title",   "capitalize", "find",     "rfind", "count",  "join",       "isdigit",
    "isalpha", "isalnum", "isspace", "islower",    "isupper",  "index", "format"};
constexpr std::array<std::string_view, 5> kDictMethods = {"items", "keys", "values", "get", "copy"};
constexpr std::array<std::string_view, 3> kListMethods = {"index", "count", "copy"};
constexpr std::array<std::string_view, 13> kMutators = {"append",  "extend", "insert", "pop",    "remove",
                                                        "reverse", "sort",   "clear",  "update", "setdefault",
                                                        "popitem", "add",    "discard"};

template <size_t N>
bool contains(const std::array<std::string_view, N>& set, std::string_view name) {
  return std::find(set.begin(), set.end(), name) != set.end();
}

// jinja2's object_type_repr: "None" or "dict object".
std::string object_type(const JinjaValue& obj) {
  if (obj.is_none()) return "None";
  return std::string(obj.type_name()) + " object";
}

std::string object_repr(const JinjaValue& obj) { return "'" + object_type(obj) + "'"; }

JinjaValue missing_attribute(const JinjaValue& obj, std::string_view name) {
  return JinjaValue::undefined(object_repr(obj) + " has no attribute '" + std::string(name) + "'");
}

JinjaValue bound_method(const JinjaValue& self, std::string_view name) {
  auto fn = std::make_shared<Callable>();
  fn->kind = Callable::Kind::kMethod;
  fn->name = std::string(name);
  fn->self = self;
  return JinjaValue::callable(std::move(fn));
}

Status type_error(std::string m) { return invalid_argument(std::move(m)); }

Result<std::string> string_arg(const JinjaValue* v, std::string_view fn) {
  if (v == nullptr || !v->is_string()) {
    return type_error(std::string(fn) + "() argument must be str, not " + std::string(v ? v->type_name() : "nothing"));
  }
  return v->as_string();
}

Result<std::optional<std::string>> optional_string_arg(const JinjaValue* v, std::string_view fn) {
  if (v == nullptr || v->is_none()) return std::optional<std::string>();
  TERN_ASSIGN_OR_RETURN(std::string s, string_arg(v, fn));
  return std::optional<std::string>(std::move(s));
}

Result<long> int_arg(const JinjaValue* v, long fallback, std::string_view fn) {
  if (v == nullptr) return fallback;
  if (!v->is_integral())
    return type_error(std::string(fn) + "() argument must be int, not " + std::string(v->type_name()));
  return static_cast<long>(v->as_int());
}

JinjaValue string_list(std::vector<std::string> parts) {
  std::vector<JinjaValue> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(JinjaValue::string(std::move(p)));
  return JinjaValue::list(std::move(items));
}

// startswith/endswith accept a str or a tuple of str.
Result<bool> affix_match(const std::string& s, const JinjaValue* arg, bool prefix, std::string_view fn) {
  std::vector<std::string> options;
  if (arg != nullptr && arg->is_list() && arg->as_list().is_tuple) {
    for (const JinjaValue& v : arg->as_list().items) {
      TERN_ASSIGN_OR_RETURN(std::string o, string_arg(&v, fn));
      options.push_back(std::move(o));
    }
  } else {
    TERN_ASSIGN_OR_RETURN(std::string o, string_arg(arg, fn));
    options.push_back(std::move(o));
  }
  for (const std::string& o : options) {
    if (o.size() > s.size()) continue;
    if (prefix ? s.compare(0, o.size(), o) == 0 : s.compare(s.size() - o.size(), o.size(), o) == 0) return true;
  }
  return false;
}

template <typename Pred>
JinjaValue all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return JinjaValue::boolean(false);
  for (char32_t c : decode_utf8(s)) {
    if (!pred(c)) return JinjaValue::boolean(false);
  }
  return JinjaValue::boolean(true);
}

bool is_digit(char32_t c) { return c >= '0' && c <= '9'; }

// str.format with plain fields: {}, {0}, {name}, {!r}, {{ and }}; format
// specs and field attribute/index lookups are refused.
Result<std::string> str_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}')
        ++i;
      else
        return invalid_argument("Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) return invalid_argument("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 's';
    size_t bang = field.find('!');
    if (bang != std::string::npos) {
      if (bang + 2 != field.size() || (field[bang + 1] != 'r' && field[bang + 1] != 's')) {
        return unsupported("format conversion '" + field.substr(bang) + "' is not supported");
      }
      conversion = field[bang + 1];
      field.resize(bang);
    }
    if (field.find_first_of(":.[") != std::string::npos) {
      return unsupported("format field '{" + field + "}' is not supported");
    }
    const JinjaValue* v = nullptr;
    if (field.empty() || field.find_first_not_of("0123456789") == std::string::npos) {
      size_t index = field.empty() ? auto_index++ : static_cast<size_t>(std::stoul(field.substr(0, 9)));
      if (index >= a.args.size())
        return invalid_argument("Replacement index " + std::to_string(index) + " out of range");
      v = &a.args[index];
    } else {
      for (const auto& [k, val] : a.kwargs) {
        if (k == field) v = &val;
      }
      if (v == nullptr) return invalid_argument("'" + field + "'");
    }
    out += conversion == 'r' ? repr(*v) : to_str(*v);
  }
  return out;
}

Result<JinjaValue> string_method(const std::string& s, std::string_view name, const CallArgs& a, size_t max_size) {
  // Methods walk the string once; call_method charged for it.
  auto bind = [&](std::vector<std::string_view> params) { return ArgBinder::bind(a, name, std::move(params)); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    TERN_ASSIGN_OR_RETURN(ArgBinder b, bind({"chars"}));
    TERN_ASSIGN_OR_RETURN(auto chars, optional_string_arg(b.get(0), name));
    return JinjaValue::string(py_strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    TERN_ASSIGN_OR_RETURN(ArgBinder b, bind({"prefix"}));
    TERN_ASSIGN_OR_RETURN(bool m, affix_match(s, b.get(0), name == "startswith", name));
    return JinjaValue::boolean(m);
  }
  if (name == "split" || name == "rsplit") {
    TERN_ASSIGN_OR_RETURN(ArgBinder b, bind({"sep", "maxsplit"}));
    TERN_ASSIGN_OR_RETURN(auto sep, optional_string_arg(b.get(0), name));
    TERN_ASSIGN_OR_RETURN(long maxsplit, int_arg(b.get(1), -1, name));
    if (sep && sep->empty()) return invalid_argument("empty separator");
    return string_list(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    TERN_ASSIGN_OR_RETURN(ArgBinder b, bind({"keepends"}));
    return string_list(py_splitlines(s, b.get(0) != nullptr && b.get(0)->truthy()));
  }
  if (name == "upper") return JinjaValue::string(py_upper(s));
  if (name == "lower") return JinjaValue::string(py_lower(s));
  if (name == "title") return JinjaValue::string(py_title(s));
  if (name == "capitalize") return JinjaValue::string(py_capitalize(s));
  if (name == "replace") {
    TERN_ASSIGN_OR_RETURN(ArgBinder b, bind({"old", "new", "count"}));
    TERN_ASSIGN_OR_RETURN(std::string old_text, string_arg(b.get(0), name));
    TERN_ASSIGN_OR_RETURN(std::string new_text, string_arg(b.get(1), name));
    TERN_ASSIGN_OR_RETURN(long count, int_arg(b.get(2), -1, name));
    auto out = py_replace(s, old_text, new_text, count, max_size);
    if (!out) return out_of_range("string too large");
    return JinjaValue::string(std::move(*out));
  }
  if (name == "find" || name == "rfind" || name == "index") {
    TERN_ASSIGN_OR_RETURN(ArgBinder b, bind({"sub"}));
    TERN_ASSIGN_OR_RETURN(std::string sub, string_arg(b.get(0), name));
    size_t pos = name == "rfind" ? s.rfind(sub) : s.find(sub);
    if (pos == std::string::npos) {
      if (name == "index") return invalid_argument("substring not found");
      return JinjaValue::integer(-1);
    }
    return JinjaValue::integer(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, pos))));
  }
  if (name == "count") {
    TERN_ASSIGN_OR_RETURN(ArgBinder b, bind({"sub"}));
    TERN_ASSIGN_OR_RETURN(std::string sub, string_arg(b.get(0), name));
    if (sub.empty()) return JinjaValue::integer(static_cast<int64_t>(utf8_length(s) + 1));
    int64_t n = 0;
    for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
    return JinjaValue::integer(n);
  }
  if (name == "join") {
    TERN_ASSIGN_OR_RETURN(ArgBinder b, bind({"iterable"}));
    if (b.get(0) == nullptr) return type_error("join() takes exactly one argument (0 given)");
    TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(*b.get(0)));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return type_error("sequence item " + std::to_string(i) + ": expected str instance, " +
                          std::string(items[i].type_name()) + " found");
      }
      if (i > 0) out += s;
      out += items[i].as_string();
      if (out.size() > max_size) return out_of_range("string too large");
    }
    return JinjaValue::string(std::move(out));
  }
  if (name == "format") {
    TERN_ASSIGN_OR_RETURN(std::string out, str_format(s, a));
    if (out.size() > max_size) return out_of_range("string too large");
    return JinjaValue::string(std::move(out));
  }
  if (name == "isdigit") return all_chars(s, is_digit);
  if (name == "isalpha") return all_chars(s, py_isalpha);
  if (name == "isalnum") return all_chars(s, [](char32_t c) { return py_isalpha(c) || py_isnumeric(c); });
  if (name == "isspace") return all_chars(s, py_isspace);
  if (name == "islower" || name == "isupper") {
    bool any_cased = false;
    for (char32_t c : decode_utf8(s)) {
      std::string one;
      append_utf8(one, c);
      std::string up = py_upper(one);
      std::string low = py_lower(one);
      if (up == low) continue;
      any_cased = true;
      if (name == "islower" ? one != low : one != up) return JinjaValue::boolean(false);
    }
    return JinjaValue::boolean(any_cased);
  }
  return unsupported("str." + std::string(name) + "() is not supported");
}

Result<JinjaValue> dict_method(const JinjaValue& self, std::string_view name, const CallArgs& a) {
  const JinjaDict& d = self.as_dict();
  if (name == "get") {
    TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, name, {"key", "default"}));
    if (b.get(0) == nullptr) return type_error("get expected at least 1 argument, got 0");
    const JinjaValue* v = d.find(*b.get(0));
    if (v != nullptr) return *v;
    return b.get(1) ? *b.get(1) : JinjaValue::none();
  }
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, name, {}));
  (void)b;
  if (name == "copy") return self;
  std::vector<JinjaValue> out;
  out.reserve(d.size());
  for (const auto& [k, v] : d.items()) {
    if (name == "items") {
      out.push_back(JinjaValue::list({k, v}, /*is_tuple=*/true));
    } else {
      out.push_back(name == "keys" ? k : v);
    }
  }
  return JinjaValue::list(std::move(out));
}

Result<JinjaValue> list_method(const JinjaValue& self, std::string_view name, const CallArgs& a) {
  if (name == "copy") {
    TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, name, {}));
    (void)b;
    return self;
  }
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, name, {"value"}));
  if (b.get(0) == nullptr) return type_error(std::string(name) + "() takes exactly one argument (0 given)");
  const auto& items = self.as_list().items;
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!py_equal(items[i], *b.get(0))) continue;
    if (name == "index") return JinjaValue::integer(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") return invalid_argument(repr(*b.get(0)) + " is not in list");
  return JinjaValue::integer(count);
}

// Python's slice.indices(length).
void adjust_slice(int64_t len, const JinjaValue* start, const JinjaValue* stop, int64_t step, int64_t* b, int64_t* e) {
  auto clamp = [&](const JinjaValue* v, int64_t fallback) {
    if (v == nullptr || v->is_none()) return fallback;
    int64_t x = v->as_int();
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  *b = clamp(start, step < 0 ? len - 1 : 0);
  *e = clamp(stop, step < 0 ? -1 : len);
}

}  // namespace

Result<ArgBinder> ArgBinder::bind(const CallArgs& args, std::string_view function,
                                  std::vector<std::string_view> params) {
  ArgBinder b;
  b.values_.assign(params.size(), nullptr);
  if (args.args.size() > params.size()) {
    return type_error(std::string(function) + "() takes at most " + std::to_string(params.size()) + " argument(s) (" +
                      std::to_string(args.args.size()) + " given)");
  }
  for (size_t i = 0; i < args.args.size(); ++i) b.values_[i] = &args.args[i];
  for (const auto& [key, value] : args.kwargs) {
    auto it = std::find(params.begin(), params.end(), key);
    if (it == params.end()) {
      return type_error(std::string(function) + "() got an unexpected keyword argument '" + key + "'");
    }
    size_t i = static_cast<size_t>(it - params.begin());
    if (b.values_[i] != nullptr) {
      return type_error(std::string(function) + "() got multiple values for argument '" + key + "'");
    }
    b.values_[i] = &value;
  }
  return b;
}

size_t ArgBinder::given() const {
  return static_cast<size_t>(std::count_if(values_.begin(), values_.end(), [](const auto* v) { return v != nullptr; }));
}

Result<JinjaValue> get_attribute(const JinjaValue& obj, std::string_view name) {
  if (obj.is_undefined()) return invalid_argument(undefined_message(obj));
  if (!name.empty() && name[0] == '_') {
    return JinjaValue::undefined("access to attribute '" + std::string(name) + "' of " + object_repr(obj) +
                                 " is unsafe");
  }
  if (contains(kMutators, name) && (obj.is_dict() || obj.is_list())) {
    return JinjaValue::undefined("access to attribute '" + std::string(name) + "' of " + object_repr(obj) +
                                 " is unsafe");
  }
  switch (obj.kind()) {
    case JinjaValue::Kind::kDict: {
      if (contains(kDictMethods, name)) return bound_method(obj, name);
      const JinjaValue* v = obj.as_dict().find(name);
      return v ? *v : missing_attribute(obj, name);
    }
    case JinjaValue::Kind::kString:
      if (contains(kStrMethods, name)) return bound_method(obj, name);
      return missing_attribute(obj, name);
    case JinjaValue::Kind::kList:
      if (contains(kListMethods, name)) return bound_method(obj, name);
      return missing_attribute(obj, name);
    case JinjaValue::Kind::kNamespace: {
      const JinjaValue* v = obj.namespace_attrs().find(name);
      return v ? *v : missing_attribute(obj, name);
    }
    default:
      return missing_attribute(obj, name);
  }
}

Result<JinjaValue> get_item(const JinjaValue& obj, const JinjaValue& key) {
  if (obj.is_undefined()) return invalid_argument(undefined_message(obj));
  if (key.is_integral() && (obj.is_list() || obj.is_string())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto& items = obj.as_list().items;
      int64_t n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
    } else {
      std::u32string cps = decode_utf8(obj.as_string());
      int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        std::string out;
        append_utf8(out, cps[static_cast<size_t>(i)]);
        return JinjaValue::string(std::move(out));
      }
    }
    return JinjaValue::undefined(object_type(obj) + " has no element " + std::to_string(key.as_int()));
  }
  if (obj.is_dict()) {
    const JinjaValue* v = obj.as_dict().find(key);
    if (v != nullptr) return *v;
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());
  return JinjaValue::undefined(object_type(obj) + " has no element " + repr(key));
}

Result<JinjaValue> get_slice(const JinjaValue& obj, const JinjaValue* start, const JinjaValue* stop,
                             const JinjaValue* step) {
  if (obj.is_undefined()) return invalid_argument(undefined_message(obj));
  for (const JinjaValue* v : {start, stop, step}) {
    if (v != nullptr && !v->is_none() && !v->is_integral()) {
      return type_error("slice indices must be integers or None or have an __index__ method");
    }
  }
  int64_t st = (step == nullptr || step->is_none()) ? 1 : step->as_int();
  if (st == 0) return invalid_argument("slice step cannot be zero");
  if (!obj.is_list() && !obj.is_string()) return JinjaValue::undefined(object_repr(obj) + " is not subscriptable");
  std::u32string cps;
  int64_t len = 0;
  if (obj.is_list()) {
    len = static_cast<int64_t>(obj.as_list().items.size());
  } else {
    cps = decode_utf8(obj.as_string());
    len = static_cast<int64_t>(cps.size());
  }
  int64_t b = 0;
  int64_t e = 0;
  adjust_slice(len, start, stop, st, &b, &e);
  std::vector<size_t> picked;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) picked.push_back(static_cast<size_t>(i));
  if (obj.is_list()) {
    std::vector<JinjaValue> items;
    items.reserve(picked.size());
    for (size_t i : picked) items.push_back(obj.as_list().items[i]);
    return JinjaValue::list(std::move(items), obj.as_list().is_tuple);
  }
  std::u32string out;
  for (size_t i : picked) out += cps[i];
  return JinjaValue::string(encode_utf8(out));
}

Status Budget::charge(double units) {
  work_ += units;
  if (work_ > max_work_) {
    return out_of_range("rendering the chat template took more than " +
                        std::to_string(static_cast<uint64_t>(max_work_)) + " steps");
  }
  return Status::ok();
}

Result<JinjaValue> call_method(const JinjaValue& self, std::string_view name, const CallArgs& args, Budget& budget) {
  double weight = self.weight();
  for (const JinjaValue& a : args.args) weight += a.weight();
  TERN_RETURN_IF_ERROR(budget.charge(weight));
  Result<JinjaValue> r = internal_error("method on a value without methods");
  switch (self.kind()) {
    case JinjaValue::Kind::kString:
      r = string_method(self.as_string(), name, args, budget.max_size());
      break;
    case JinjaValue::Kind::kDict:
      r = dict_method(self, name, args);
      break;
    case JinjaValue::Kind::kList:
      r = list_method(self, name, args);
      break;
    default:
      break;
  }
  if (r.is_ok()) TERN_RETURN_IF_ERROR(budget.charge(r.value().weight()));
  return r;
}

}  // namespace tern::jinja
