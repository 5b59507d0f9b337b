// Filters and tests of jinja2 (jinja2/filters.py, jinja2/tests.py) on
// JinjaValue. Where jinja2 returns a generator (map, select, unique, items,
// reverse) the result is an iterator value: always truthy, no len().
#include "tokenizer/jinja_filters.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <unordered_set>

#include "tokenizer/jinja_json.h"
#include "tokenizer/jinja_ops.h"
#include "tokenizer/jinja_text.h"

namespace tern::jinja {
namespace {

using FilterFn = Result<JinjaValue> (*)(const JinjaValue&, const CallArgs&, Budget&);

Status type_error(std::string m) { return invalid_argument(std::move(m)); }

bool flag(const ArgBinder& b, size_t i) { return b.get(i) != nullptr && b.get(i)->truthy(); }

JinjaValue ignore_case(const JinjaValue& v) { return v.is_string() ? JinjaValue::string(py_lower(v.as_string())) : v; }

// make_attrgetter: "a.b.0" walks items; digit parts are list indexes.
Result<JinjaValue> attr_path(const JinjaValue& item, const JinjaValue* attribute, const JinjaValue* fallback) {
  if (attribute == nullptr || attribute->is_none()) return item;
  std::vector<JinjaValue> parts;
  if (attribute->is_string()) {
    for (const std::string& p : py_split(attribute->as_string(), std::string("."), -1)) {
      bool digits = !p.empty() && p.find_first_not_of("0123456789") == std::string::npos;
      parts.push_back(digits && p.size() < 18 ? JinjaValue::integer(std::atoll(p.c_str())) : JinjaValue::string(p));
    }
  } else {
    parts.push_back(*attribute);
  }
  JinjaValue cur = item;
  for (const JinjaValue& part : parts) {
    TERN_ASSIGN_OR_RETURN(cur, get_item(cur, part));
    if (fallback != nullptr && !fallback->is_none() && cur.is_undefined()) cur = *fallback;
  }
  return cur;
}

// Stable merge sort that tolerates a failing comparison (std::stable_sort
// would be undefined behaviour with an inconsistent comparator).
Status merge_sort(std::vector<size_t>& idx, const std::function<Result<bool>(size_t, size_t)>& less) {
  std::vector<size_t> tmp(idx.size());
  for (size_t width = 1; width < idx.size(); width *= 2) {
    for (size_t lo = 0; lo < idx.size(); lo += 2 * width) {
      size_t mid = std::min(lo + width, idx.size());
      size_t hi = std::min(lo + 2 * width, idx.size());
      size_t i = lo;
      size_t j = mid;
      size_t k = lo;
      while (i < mid && j < hi) {
        TERN_ASSIGN_OR_RETURN(bool right_first, less(idx[j], idx[i]));
        tmp[k++] = right_first ? idx[j++] : idx[i++];
      }
      while (i < mid) tmp[k++] = idx[i++];
      while (j < hi) tmp[k++] = idx[j++];
    }
    idx.swap(tmp);
  }
  return Status::ok();
}

Result<std::vector<JinjaValue>> sorted_by(std::vector<JinjaValue> items, const std::vector<JinjaValue>& keys,
                                          bool reverse) {
  std::vector<size_t> idx(items.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  TERN_RETURN_IF_ERROR(merge_sort(idx, [&](size_t a, size_t b) -> Result<bool> {
    // Python's sorted(reverse=True) keeps equal items in their original order.
    TERN_ASSIGN_OR_RETURN(int c, py_compare(keys[a], keys[b], "<"));
    return reverse ? c > 0 : c < 0;
  }));
  std::vector<JinjaValue> out;
  out.reserve(items.size());
  for (size_t i : idx) out.push_back(std::move(items[i]));
  return out;
}

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

Result<JinjaValue> f_batch(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "batch", {"linecount", "fill_with"}));
  if (b.get(0) == nullptr || !b.get(0)->is_integral()) return type_error("batch() needs an integer linecount");
  int64_t n = b.get(0)->as_int();
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  std::vector<JinjaValue> out;
  std::vector<JinjaValue> tmp;
  for (JinjaValue& item : items) {
    if (static_cast<int64_t>(tmp.size()) == n) {
      out.push_back(JinjaValue::list(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(std::move(item));
  }
  if (!tmp.empty()) {
    if (b.get(1) != nullptr && !b.get(1)->is_none()) {
      while (static_cast<int64_t>(tmp.size()) < n) tmp.push_back(*b.get(1));
    }
    out.push_back(JinjaValue::list(std::move(tmp)));
  }
  return JinjaValue::iterator(std::move(out));
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

Result<JinjaValue> f_dictsort(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "dictsort", {"case_sensitive", "by", "reverse"}));
  if (!v.is_dict()) return type_error("dictsort() needs a mapping, not " + std::string(v.type_name()));
  size_t pos = 0;
  if (b.get(1) != nullptr) {
    std::string by = to_str(*b.get(1));
    if (by != "key" && by != "value") return invalid_argument("You can only sort by either \"key\" or \"value\"");
    pos = by == "value" ? 1 : 0;
  }
  std::vector<JinjaValue> items;
  std::vector<JinjaValue> keys;
  for (const auto& kv : v.as_dict().items()) {
    items.push_back(JinjaValue::list({kv.first, kv.second}, true));
    JinjaValue key = pos == 0 ? kv.first : kv.second;
    keys.push_back(flag(b, 0) ? key : ignore_case(key));
  }
  TERN_ASSIGN_OR_RETURN(items, sorted_by(std::move(items), keys, flag(b, 2)));
  return JinjaValue::list(std::move(items));
}

Result<JinjaValue> f_escape(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "escape", {}));
  return JinjaValue::string(html_escape(to_str(v)));
}

Result<JinjaValue> f_first(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "first", {}));
  if (v.is_list()) {
    if (v.as_list().items.empty()) return JinjaValue::undefined("No first item, sequence was empty.");
    return v.as_list().items.front();
  }
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  if (items.empty()) return JinjaValue::undefined("No first item, sequence was empty.");
  return items.front();
}

Result<JinjaValue> f_last(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "last", {}));
  if (v.is_list() && v.as_list().is_iterator) return type_error("'generator' object is not reversible");
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  if (items.empty()) return JinjaValue::undefined("No last item, sequence was empty.");
  return items.back();
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
    if (d && std::isfinite(*d) && std::fabs(*d) < 9.2e18) return JinjaValue::integer(static_cast<int64_t>(std::trunc(*d)));
  }
  return fallback;
}

Result<JinjaValue> f_join(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "join", {"d", "attribute"}));
  std::string sep = b.get(0) ? to_str(*b.get(0)) : "";
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    TERN_ASSIGN_OR_RETURN(JinjaValue item, attr_path(items[i], b.get(1), nullptr));
    out += to_str(item);
    if (out.size() > budget.max_size()) return out_of_range("string too large");
  }
  return JinjaValue::string(std::move(out));
}

Result<JinjaValue> f_list(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "list", {}));
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  return JinjaValue::list(std::move(items));
}

Result<JinjaValue> f_lower(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "lower", {}));
  return JinjaValue::string(py_lower(to_str(v)));
}

Result<JinjaValue> f_upper(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "upper", {}));
  return JinjaValue::string(py_upper(to_str(v)));
}

Result<JinjaValue> f_items(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "items", {}));
  if (v.is_undefined()) return JinjaValue::iterator({});
  if (!v.is_dict()) return type_error("Can only get item pairs from a mapping.");
  std::vector<JinjaValue> out;
  for (const auto& kv : v.as_dict().items()) out.push_back(JinjaValue::list({kv.first, kv.second}, true));
  return JinjaValue::iterator(std::move(out));
}

Result<JinjaValue> f_map(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  std::vector<JinjaValue> out;
  out.reserve(items.size());
  const JinjaValue* attribute = nullptr;
  const JinjaValue* fallback = nullptr;
  if (a.args.empty()) {
    for (const auto& [k, val] : a.kwargs) {
      if (k == "attribute") {
        attribute = &val;
      } else if (k == "default") {
        fallback = &val;
      } else {
        return invalid_argument("Unexpected keyword argument '" + k + "'");
      }
    }
    if (attribute == nullptr) return invalid_argument("map requires a filter argument");
    for (const JinjaValue& item : items) {
      TERN_RETURN_IF_ERROR(budget.charge(1));
      TERN_ASSIGN_OR_RETURN(JinjaValue x, attr_path(item, attribute, fallback));
      out.push_back(std::move(x));
    }
    return JinjaValue::iterator(std::move(out));
  }
  std::string name = to_str(a.args[0]);
  if (filter_support(name) != Support::kSupported) return invalid_argument("No filter named '" + name + "'.");
  CallArgs rest;
  rest.args.assign(a.args.begin() + 1, a.args.end());
  rest.kwargs = a.kwargs;
  for (const JinjaValue& item : items) {
    TERN_ASSIGN_OR_RETURN(JinjaValue x, apply_filter(name, item, rest, budget));
    out.push_back(std::move(x));
  }
  return JinjaValue::iterator(std::move(out));
}

Result<JinjaValue> min_or_max(const JinjaValue& v, const CallArgs& a, bool want_max) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, want_max ? "max" : "min", {"case_sensitive", "attribute"}));
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  if (items.empty()) return JinjaValue::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  TERN_ASSIGN_OR_RETURN(JinjaValue best_key, attr_path(items[0], b.get(1), nullptr));
  if (!flag(b, 0)) best_key = ignore_case(best_key);
  for (size_t i = 1; i < items.size(); ++i) {
    TERN_ASSIGN_OR_RETURN(JinjaValue key, attr_path(items[i], b.get(1), nullptr));
    if (!flag(b, 0)) key = ignore_case(key);
    TERN_ASSIGN_OR_RETURN(int c, py_compare(key, best_key, want_max ? ">" : "<"));
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

Result<JinjaValue> f_max(const JinjaValue& v, const CallArgs& a, Budget&) { return min_or_max(v, a, true); }
Result<JinjaValue> f_min(const JinjaValue& v, const CallArgs& a, Budget&) { return min_or_max(v, a, false); }

Result<JinjaValue> select_or_reject(const JinjaValue& v, const CallArgs& a, bool keep, bool lookup_attr,
                                    Budget& budget) {
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  std::vector<JinjaValue> out;
  if (!v.truthy()) return JinjaValue::iterator({});
  size_t off = 0;
  const JinjaValue* attribute = nullptr;
  if (lookup_attr) {
    if (a.args.empty()) return invalid_argument("Missing parameter for attribute name");
    attribute = &a.args[0];
    off = 1;
  }
  std::string test;
  CallArgs test_args;
  if (a.args.size() > off) {
    test = to_str(a.args[off]);
    if (test_support(test) != Support::kSupported) return invalid_argument("No test named '" + test + "'.");
    test_args.args.assign(a.args.begin() + static_cast<long>(off) + 1, a.args.end());
    test_args.kwargs = a.kwargs;
  }
  for (const JinjaValue& item : items) {
    TERN_RETURN_IF_ERROR(budget.charge(1));
    TERN_ASSIGN_OR_RETURN(JinjaValue x, attr_path(item, attribute, nullptr));
    bool pass = false;
    if (test.empty()) {
      pass = x.truthy();
    } else {
      TERN_ASSIGN_OR_RETURN(pass, apply_test(test, x, test_args, budget));
    }
    if (pass == keep) out.push_back(item);
  }
  return JinjaValue::iterator(std::move(out));
}

Result<JinjaValue> f_select(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  return select_or_reject(v, a, true, false, budget);
}
Result<JinjaValue> f_reject(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  return select_or_reject(v, a, false, false, budget);
}
Result<JinjaValue> f_selectattr(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  return select_or_reject(v, a, true, true, budget);
}
Result<JinjaValue> f_rejectattr(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  return select_or_reject(v, a, false, true, budget);
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

Result<JinjaValue> f_reverse(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "reverse", {}));
  if (v.is_string()) {
    std::u32string cps = decode_utf8(v.as_string());
    return JinjaValue::string(encode_utf8(std::u32string(cps.rbegin(), cps.rend())));
  }
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  std::vector<JinjaValue> out(items.rbegin(), items.rend());
  if (v.is_list() && v.as_list().is_iterator) return JinjaValue::list(std::move(out));
  return JinjaValue::iterator(std::move(out));
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

Result<JinjaValue> f_sort(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "sort", {"reverse", "case_sensitive", "attribute"}));
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  std::vector<JinjaValue> keys;
  for (const JinjaValue& item : items) {
    std::vector<JinjaValue> parts;
    std::vector<std::string> attrs;
    if (b.get(2) != nullptr && b.get(2)->is_string()) attrs = py_split(b.get(2)->as_string(), std::string(","), -1);
    if (attrs.size() > 1) {  // make_multi_attrgetter: a list of keys
      for (const std::string& name : attrs) {
        JinjaValue attr = JinjaValue::string(name);
        TERN_ASSIGN_OR_RETURN(JinjaValue k, attr_path(item, &attr, nullptr));
        parts.push_back(flag(b, 1) ? k : ignore_case(k));
      }
      keys.push_back(JinjaValue::list(std::move(parts)));
    } else {
      TERN_ASSIGN_OR_RETURN(JinjaValue k, attr_path(item, b.get(2), nullptr));
      keys.push_back(flag(b, 1) ? k : ignore_case(k));
    }
  }
  TERN_RETURN_IF_ERROR(budget.charge(4.0 * static_cast<double>(items.size()) * std::log2(items.size() + 2.0)));
  TERN_ASSIGN_OR_RETURN(items, sorted_by(std::move(items), keys, flag(b, 0)));
  return JinjaValue::list(std::move(items));
}

Result<JinjaValue> f_string(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "string", {}));
  return v.is_string() ? v : JinjaValue::string(to_str(v));
}

Result<JinjaValue> f_sum(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "sum", {"attribute", "start"}));
  JinjaValue rv = b.get(1) ? *b.get(1) : JinjaValue::integer(0);
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  // Strings and lists accumulate in place (the same result as repeated +,
  // without copying the growing prefix for every item).
  std::string text;
  std::vector<JinjaValue> list;
  bool in_place = false;
  for (const JinjaValue& item : items) {
    TERN_ASSIGN_OR_RETURN(JinjaValue x, attr_path(item, b.get(0), nullptr));
    TERN_RETURN_IF_ERROR(budget.charge(x.weight()));
    bool same_kind = (rv.is_string() && x.is_string()) ||
                     (rv.is_list() && x.is_list() && rv.as_list().is_tuple == x.as_list().is_tuple &&
                      !rv.as_list().is_iterator && !x.as_list().is_iterator);
    if (!same_kind) {
      if (in_place) rv = rv.is_string() ? JinjaValue::string(std::move(text)) : JinjaValue::list(std::move(list), rv.as_list().is_tuple);
      in_place = false;
      TERN_ASSIGN_OR_RETURN(rv, binary_op(BinaryOp::kAdd, rv, x, budget.max_size()));
      continue;
    }
    if (!in_place) {
      in_place = true;
      if (rv.is_string()) {
        text = rv.as_string();
      } else {
        list = rv.as_list().items;
      }
    }
    if (rv.is_string()) {
      text += x.as_string();
      if (text.size() > budget.max_size()) return out_of_range("string too large");
    } else {
      list.insert(list.end(), x.as_list().items.begin(), x.as_list().items.end());
      if (list.size() > budget.max_items()) return out_of_range("list too large");
    }
  }
  if (in_place) {
    return rv.is_string() ? JinjaValue::string(std::move(text)) : JinjaValue::list(std::move(list), rv.as_list().is_tuple);
  }
  return rv;
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

Result<JinjaValue> f_unique(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "unique", {"case_sensitive", "attribute"}));
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  // Python hashes the keys; strings and integral numbers by value, others
  // (tuples, floats) by their repr, which agrees for the values JSON gives.
  std::unordered_set<std::string> seen_strings;
  std::unordered_set<int64_t> seen_ints;
  std::unordered_set<std::string> seen_other;
  std::vector<JinjaValue> out;
  for (const JinjaValue& item : items) {
    TERN_RETURN_IF_ERROR(budget.charge(1));
    TERN_ASSIGN_OR_RETURN(JinjaValue key, attr_path(item, b.get(1), nullptr));
    if (!flag(b, 0)) key = ignore_case(key);
    bool fresh = false;
    if (key.is_string()) {
      fresh = seen_strings.insert(key.as_string()).second;
    } else if (key.is_integral() || (key.is_float() && key.as_float() == std::trunc(key.as_float()) &&
                                     std::fabs(key.as_float()) < 9e18)) {
      fresh = seen_ints.insert(key.is_float() ? static_cast<int64_t>(key.as_float()) : key.as_int()).second;
    } else {
      if (key.is_dict() || key.is_namespace() || (key.is_list() && !key.as_list().is_tuple)) {
        return type_error("unhashable type: '" + std::string(key.type_name()) + "'");
      }
      TERN_RETURN_IF_ERROR(budget.charge(key.weight()));
      fresh = seen_other.insert(repr(key)).second;
    }
    if (fresh) out.push_back(item);
  }
  return JinjaValue::iterator(std::move(out));
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
    {"abs", f_abs},         {"attr", f_attr},           {"batch", f_batch},       {"capitalize", f_capitalize},
    {"center", f_center},   {"count", f_length},        {"d", f_default},         {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},     {"forceescape", f_escape},
    {"first", f_first},     {"float", f_float},         {"format", f_format},     {"indent", f_indent},
    {"int", f_int},         {"join", f_join},           {"last", f_last},         {"length", f_length},
    {"list", f_list},       {"lower", f_lower},         {"items", f_items},       {"map", f_map},
    {"max", f_max},         {"min", f_min},             {"reject", f_reject},     {"rejectattr", f_rejectattr},
    {"replace", f_replace}, {"reverse", f_reverse},     {"round", f_round},       {"safe", f_safe},
    {"select", f_select},   {"selectattr", f_selectattr}, {"sort", f_sort},       {"string", f_string},
    {"sum", f_sum},         {"title", f_title},         {"tojson", f_tojson},     {"trim", f_trim},
    {"unique", f_unique},   {"upper", f_upper},         {"wordcount", f_wordcount},
};

constexpr std::string_view kUnsupportedFilters[] = {"filesizeformat", "groupby",  "pprint",  "random",
                                                    "slice",          "striptags", "truncate", "urlencode",
                                                    "urlize",         "wordwrap", "xmlattr"};

constexpr std::string_view kTests[] = {
    "odd",    "even",    "divisibleby", "defined", "undefined", "filter",   "test",     "none",   "boolean",
    "false",  "true",    "integer",     "float",   "lower",     "upper",    "string",   "mapping", "number",
    "sequence", "iterable", "callable", "sameas",  "escaped",   "in",       "==",       "eq",      "equalto",
    "!=",     "ne",      ">",           "gt",      "greaterthan", "ge",     ">=",       "<",       "lt",
    "lessthan", "<=",    "le"};

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

Result<JinjaValue> apply_filter(std::string_view name, const JinjaValue& value, const CallArgs& args,
                                Budget& budget) {
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
    TERN_ASSIGN_OR_RETURN(JinjaValue r, call_method(JinjaValue::string(s), name == "lower" ? "islower" : "isupper", none, budget));
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
