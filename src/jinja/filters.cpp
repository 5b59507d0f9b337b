// The filter and test tables of jinja2 (jinja2/filters.py, jinja2/tests.py)
// with the string and number filters and every test; the sequence filters
// live in sequence_filters.cpp. `tojson` is transformers' version.
#include "jinja/filters.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/json.h"
#include "jinja/ops.h"
#include "jinja/sequence_filters.h"
#include "jinja/text.h"

namespace tern::jinja {
namespace {

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Python int(str, base) for base 10 or 0, and float(str).
std::optional<int64_t> parse_int(const std::string& text, int base) {
  std::string s = py_strip(text, std::nullopt, true, true);
  size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (base == 0) {
    base = 10;
    if (s.size() > i + 1 && s[i] == '0') {
      char p = static_cast<char>(s[i + 1] | 0x20);
      base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 10;
      if (base != 10) i += 2;
    }
  }
  std::string digits;
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && !digits.empty() && i + 1 < s.size() && s[i + 1] != '_') continue;
    digits += s[i];
  }
  if (digits.empty() || digits.find_first_of("+- ") != std::string::npos) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(digits.c_str(), &end, base);
  if (*end != '\0' || errno == ERANGE) return std::nullopt;
  return neg ? -v : v;
}

std::optional<double> parse_float(const std::string& text) {
  std::string s = py_strip(text, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    }
    clean += s[i];
  }
  if (clean.empty() || clean.find_first_of("xXpP(") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  return d;
}

// --- filters -------------------------------------------------------------

Result<JinjaValue> f_abs(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "abs", {}));
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) return out_of_range("integer overflow");
    return JinjaValue::integer(std::llabs(v.as_int()));
  }
  if (v.is_float()) return JinjaValue::number(std::fabs(v.as_float()));
  return type_error("bad operand type for abs(): '" + std::string(v.type_name()) + "'");
}

Result<JinjaValue> f_attr(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "attr", {"name"}));
  if (b.get(0) == nullptr) return type_error("attr() missing required argument 'name'");
  std::string name = to_str(*b.get(0));
  if (v.is_dict()) {  // getattr() on a dict sees its methods, never its keys
    if (name == "items" || name == "keys" || name == "values" || name == "get" || name == "copy") {
      return get_attribute(v, name);
    }
    return JinjaValue::undefined("'dict object' has no attribute '" + name + "'");
  }
  return get_attribute(v, name);
}

Result<JinjaValue> f_capitalize(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "capitalize", {}));
  return JinjaValue::string(py_capitalize(to_str(v)));
}

Result<JinjaValue> f_center(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "center", {"width"}));
  int64_t width = b.get(0) && b.get(0)->is_integral() ? b.get(0)->as_int() : 80;
  std::string s = to_str(v);
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return JinjaValue::string(std::move(s));
  if (static_cast<uint64_t>(width) > budget.max_size()) return out_of_range("center() width too large");
  int64_t marg = width - len;
  int64_t left = marg / 2 + (marg & width & 1);
  return JinjaValue::string(std::string(static_cast<size_t>(left), ' ') + s +
                            std::string(static_cast<size_t>(marg - left), ' '));
}

Result<JinjaValue> f_length(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "length", {}));
  TERN_ASSIGN_OR_RETURN(int64_t n, py_len(v));
  return JinjaValue::integer(n);
}

Result<JinjaValue> f_default(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "default", {"default_value", "boolean"}));
  if (v.is_undefined() || (flag(b, 1) && !v.truthy())) {
    return b.get(0) ? *b.get(0) : JinjaValue::string("");
  }
  return v;
}

Result<JinjaValue> f_escape(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "escape", {}));
  return JinjaValue::string(html_escape(to_str(v)));
}

Result<JinjaValue> f_float(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "float", {"default"}));
  JinjaValue fallback = b.get(0) ? *b.get(0) : JinjaValue::number(0.0);
  if (v.is_number()) return JinjaValue::number(v.as_float());
  if (v.is_string()) {
    auto d = parse_float(v.as_string());
    if (d) return JinjaValue::number(*d);
  }
  return fallback;
}

Result<JinjaValue> f_format(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  if (!a.args.empty() && !a.kwargs.empty()) {
    return invalid_argument("can't handle positional and keyword arguments at the same time");
  }
  if (!a.kwargs.empty()) return unsupported("format() with keyword arguments is not supported");
  TERN_ASSIGN_OR_RETURN(std::string s, percent_format(to_str(v), JinjaValue::list(a.args, true), budget.max_size()));
  return JinjaValue::string(std::move(s));
}

Result<JinjaValue> f_indent(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "indent", {"width", "first", "blank"}));
  std::string indention;
  if (b.get(0) == nullptr) {
    indention = "    ";
  } else if (b.get(0)->is_string()) {
    indention = b.get(0)->as_string();
  } else if (b.get(0)->is_integral()) {
    int64_t w = std::max<int64_t>(0, b.get(0)->as_int());
    if (static_cast<uint64_t>(w) > 4096) return out_of_range("indent() width too large");
    indention.assign(static_cast<size_t>(w), ' ');
  } else {
    return type_error("indent() width must be int or str");
  }
  std::string s = to_str(v) + "\n";
  std::vector<std::string> lines = py_splitlines(s, false);
  std::string rv;
  if (flag(b, 2)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
      if (rv.size() > budget.max_size()) return out_of_range("string too large");
    }
  }
  if (flag(b, 1)) rv = indention + rv;
  return JinjaValue::string(std::move(rv));
}

Result<JinjaValue> f_int(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "int", {"default", "base"}));
  JinjaValue fallback = b.get(0) ? *b.get(0) : JinjaValue::integer(0);
  int base = b.get(1) && b.get(1)->is_integral() ? static_cast<int>(b.get(1)->as_int()) : 10;
  if (v.is_integral()) return JinjaValue::integer(v.as_int());
  if (v.is_float()) {
    double d = std::trunc(v.as_float());
    if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return fallback;
    return JinjaValue::integer(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    if (base == 0 || (base >= 2 && base <= 36)) {
      auto i = parse_int(v.as_string(), base);
      if (i) return JinjaValue::integer(*i);
    }
    auto d = parse_float(v.as_string());
    if (d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
      return JinjaValue::integer(static_cast<int64_t>(std::trunc(*d)));
  }
  return fallback;
}

Result<JinjaValue> f_lower(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "lower", {}));
  return JinjaValue::string(py_lower(to_str(v)));
}

Result<JinjaValue> f_upper(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "upper", {}));
  return JinjaValue::string(py_upper(to_str(v)));
}

Result<JinjaValue> f_replace(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "replace", {"old", "new", "count"}));
  if (b.get(0) == nullptr || b.get(1) == nullptr) return type_error("replace() missing required arguments");
  long count = -1;
  if (b.get(2) != nullptr && !b.get(2)->is_none()) {
    if (!b.get(2)->is_integral()) return type_error("replace() count must be an integer");
    count = static_cast<long>(b.get(2)->as_int());
  }
  auto out = py_replace(to_str(v), to_str(*b.get(0)), to_str(*b.get(1)), count, budget.max_size());
  if (!out) return out_of_range("string too large");
  return JinjaValue::string(std::move(*out));
}

Result<JinjaValue> f_round(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "round", {"precision", "method"}));
  int64_t precision = b.get(0) && b.get(0)->is_integral() ? b.get(0)->as_int() : 0;
  std::string method = b.get(1) ? to_str(*b.get(1)) : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    return invalid_argument("method must be common, ceil or floor");
  }
  if (!v.is_number()) return type_error("type " + std::string(v.type_name()) + " doesn't define __round__ method");
  if (precision < -300 || precision > 300) return out_of_range("round() precision out of range");
  if (method == "common") {
    if (v.is_integral() && precision >= 0) return JinjaValue::integer(v.as_int());
    double x = v.as_float();
    if (!std::isfinite(x)) return JinjaValue::number(x);
    if (precision == 0) return JinjaValue::number(std::nearbyint(x));
    if (precision > 0) {
      char buf[512];
      std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), x);
      return JinjaValue::number(std::strtod(buf, nullptr));
    }
    double scale = std::pow(10.0, static_cast<double>(-precision));
    return JinjaValue::number(std::nearbyint(x / scale) * scale);
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_float() * scale;
  return JinjaValue::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Result<JinjaValue> f_safe(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "safe", {}));
  return v.is_string() ? v : JinjaValue::string(to_str(v));
}

Result<JinjaValue> f_string(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "string", {}));
  return v.is_string() ? v : JinjaValue::string(to_str(v));
}

Result<JinjaValue> f_title(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "title", {}));
  return JinjaValue::string(jinja_title(to_str(v)));
}

// transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
Result<JinjaValue> f_tojson(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b,
                        ArgBinder::bind(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions o;
  o.ensure_ascii = flag(b, 0);
  o.sort_keys = flag(b, 3);
  if (const JinjaValue* indent = b.get(1); indent != nullptr && !indent->is_none()) {
    if (indent->is_string()) {
      o.indent = indent->as_string();
    } else if (indent->is_integral()) {
      int64_t n = std::max<int64_t>(0, indent->as_int());
      if (n > 1024) return out_of_range("tojson indent too large");
      o.indent = std::string(static_cast<size_t>(n), ' ');
    } else {
      return type_error("tojson indent must be an int or a str");
    }
  }
  if (const JinjaValue* sep = b.get(2); sep != nullptr && !sep->is_none()) {
    if (!sep->is_list() || sep->as_list().items.size() != 2 || !sep->as_list().items[0].is_string() ||
        !sep->as_list().items[1].is_string()) {
      return type_error("tojson separators must be a pair of strings");
    }
    o.separators = std::make_pair(sep->as_list().items[0].as_string(), sep->as_list().items[1].as_string());
  }
  TERN_ASSIGN_OR_RETURN(std::string s, json_dumps(v, o, budget.max_size()));
  return JinjaValue::string(std::move(s));
}

Result<JinjaValue> f_trim(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "trim", {"chars"}));
  std::optional<std::string> chars;
  if (b.get(0) != nullptr && !b.get(0)->is_none()) {
    if (!b.get(0)->is_string()) return type_error("strip arg must be None or str");
    chars = b.get(0)->as_string();
  }
  return JinjaValue::string(py_strip(to_str(v), chars, true, true));
}

Result<JinjaValue> f_wordcount(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "wordcount", {}));
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : decode_utf8(to_str(v))) {
    bool word = c == '_' || py_isalpha(c) || py_isnumeric(c);  // re's \w
    if (word && !in_word) ++n;
    in_word = word;
  }
  return JinjaValue::integer(n);
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", filter_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", filter_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"forceescape", f_escape},
    {"first", filter_first},
    {"float", f_float},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"join", filter_join},
    {"last", filter_last},
    {"length", f_length},
    {"list", filter_list},
    {"lower", f_lower},
    {"items", filter_items},
    {"map", filter_map},
    {"max", filter_max},
    {"min", filter_min},
    {"reject", filter_reject},
    {"rejectattr", filter_rejectattr},
    {"replace", f_replace},
    {"reverse", filter_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", filter_select},
    {"selectattr", filter_selectattr},
    {"sort", filter_sort},
    {"string", f_string},
    {"sum", filter_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", filter_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

constexpr std::string_view kUnsupportedFilters[] = {"filesizeformat", "groupby",   "pprint",   "random",
                                                    "slice",          "striptags", "truncate", "urlencode",
                                                    "urlize",         "wordwrap",  "xmlattr"};

constexpr std::string_view kTests[] = {
    "odd",     "even",   "divisibleby", "defined",  "undefined", "filter", "test",    "none",
    "boolean", "false",  "true",        "integer",  "float",     "lower",  "upper",   "string",
    "mapping", "number", "sequence",    "iterable", "callable",  "sameas", "escaped", "in",
    "==",      "eq",     "equalto",     "!=",       "ne",        ">",      "gt",      "greaterthan",
    "ge",      ">=",     "<",           "lt",       "lessthan",  "<=",     "le"};

FilterFn find_filter(std::string_view name) {
  for (const FilterEntry& e : kFilters) {
    if (e.name == name) return e.fn;
  }
  return nullptr;
}

Result<bool> compare_test(std::string_view name, const JinjaValue& v, const JinjaValue& other) {
  if (name == "==" || name == "eq" || name == "equalto") return py_equal(v, other);
  if (name == "!=" || name == "ne") return !py_equal(v, other);
  std::string_view op = (name == ">" || name == "gt" || name == "greaterthan") ? ">"
                        : (name == ">=" || name == "ge")                       ? ">="
                        : (name == "<" || name == "lt" || name == "lessthan")  ? "<"
                                                                               : "<=";
  TERN_ASSIGN_OR_RETURN(int c, py_compare(v, other, op));
  if (op == ">") return c > 0;
  if (op == ">=") return c >= 0;
  if (op == "<") return c < 0;
  return c <= 0;
}

}  // namespace

Support filter_support(std::string_view name) {
  if (find_filter(name) != nullptr) return Support::kSupported;
  for (std::string_view n : kUnsupportedFilters) {
    if (n == name) return Support::kUnsupported;
  }
  return Support::kUnknown;
}

Support test_support(std::string_view name) {
  for (std::string_view n : kTests) {
    if (n == name) return Support::kSupported;
  }
  return Support::kUnknown;
}

Result<JinjaValue> apply_filter(std::string_view name, const JinjaValue& value, const CallArgs& args, Budget& budget) {
  FilterFn fn = find_filter(name);
  if (fn == nullptr) return invalid_argument("No filter named '" + std::string(name) + "'.");
  double weight = value.weight();
  for (const JinjaValue& a : args.args) weight += a.weight();
  TERN_RETURN_IF_ERROR(budget.charge(weight));
  TERN_ASSIGN_OR_RETURN(JinjaValue r, fn(value, args, budget));
  TERN_RETURN_IF_ERROR(budget.charge(r.weight()));
  return r;
}

Result<bool> apply_test(std::string_view name, const JinjaValue& v, const CallArgs& args, Budget& budget) {
  const JinjaValue* arg = args.args.empty() ? nullptr : &args.args[0];
  TERN_RETURN_IF_ERROR(budget.charge(1 + v.weight() + (arg ? arg->weight() : 0)));
  if (args.args.size() > 1 || !args.kwargs.empty()) {
    return type_error("test '" + std::string(name) + "' takes at most one argument");
  }
  auto need_arg = [&]() -> Status {
    if (arg == nullptr) return type_error("test '" + std::string(name) + "' needs an argument");
    return Status::ok();
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "number") return v.is_number();
  if (name == "sequence") {
    return v.is_undefined() || v.is_string() || v.is_dict() || (v.is_list() && !v.as_list().is_iterator);
  }
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_dict() || v.is_list();
  if (name == "callable") return v.is_callable() || v.is_undefined();
  if (name == "escaped") return false;
  if (name == "lower" || name == "upper") {
    std::string s = to_str(v);
    CallArgs none;
    TERN_ASSIGN_OR_RETURN(JinjaValue r,
                          call_method(JinjaValue::string(s), name == "lower" ? "islower" : "isupper", none, budget));
    return r.truthy();
  }
  if (name == "filter" || name == "test") {
    if (!v.is_string()) return false;
    return name == "filter" ? filter_support(v.as_string()) == Support::kSupported
                            : test_support(v.as_string()) == Support::kSupported;
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    JinjaValue divisor = JinjaValue::integer(2);
    if (name == "divisibleby") {
      TERN_RETURN_IF_ERROR(need_arg());
      divisor = *arg;
    }
    TERN_ASSIGN_OR_RETURN(JinjaValue m, binary_op(BinaryOp::kMod, v, divisor, budget.max_size()));
    bool zero = !m.truthy();
    return name == "odd" ? !zero : zero;
  }
  TERN_RETURN_IF_ERROR(need_arg());
  if (name == "sameas") {
    if (v.is_none() || arg->is_none()) return v.is_none() && arg->is_none();
    if (v.is_bool() || arg->is_bool()) return v.is_bool() && arg->is_bool() && v.as_bool() == arg->as_bool();
    if (v.is_int() && arg->is_int()) return v.as_int() == arg->as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    return v.shared() != nullptr && v.shared() == arg->shared();
  }
  if (name == "in") return py_contains(*arg, v);
  return compare_test(name, v, *arg);
}

}  // namespace tern::jinja
