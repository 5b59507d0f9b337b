// Sequence and mapping filters of jinja2 (jinja2/filters.py): map, select,
// reject, selectattr, rejectattr, sort, dictsort, unique, min, max, sum,
// join, first, last, list, items, reverse, batch. Where jinja2 returns a
// generator the result is an iterator value (always truthy, no len()).
#include "jinja/sequence_filters.h"

#include <cmath>
#include <functional>
#include <unordered_set>

#include "jinja/filters.h"
#include "jinja/ops.h"

namespace tern::jinja {
namespace {

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

}  // namespace

Result<JinjaValue> filter_batch(const JinjaValue& v, const CallArgs& a, Budget&) {
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

Result<JinjaValue> filter_dictsort(const JinjaValue& v, const CallArgs& a, Budget&) {
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

Result<JinjaValue> filter_first(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "first", {}));
  if (v.is_list()) {
    if (v.as_list().items.empty()) return JinjaValue::undefined("No first item, sequence was empty.");
    return v.as_list().items.front();
  }
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  if (items.empty()) return JinjaValue::undefined("No first item, sequence was empty.");
  return items.front();
}

Result<JinjaValue> filter_last(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "last", {}));
  if (v.is_list() && v.as_list().is_iterator) return type_error("'generator' object is not reversible");
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  if (items.empty()) return JinjaValue::undefined("No last item, sequence was empty.");
  return items.back();
}

Result<JinjaValue> filter_join(const JinjaValue& v, const CallArgs& a, Budget& budget) {
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

Result<JinjaValue> filter_list(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "list", {}));
  TERN_ASSIGN_OR_RETURN(std::vector<JinjaValue> items, iterate(v));
  return JinjaValue::list(std::move(items));
}

Result<JinjaValue> filter_items(const JinjaValue& v, const CallArgs& a, Budget&) {
  TERN_ASSIGN_OR_RETURN(ArgBinder b, ArgBinder::bind(a, "items", {}));
  if (v.is_undefined()) return JinjaValue::iterator({});
  if (!v.is_dict()) return type_error("Can only get item pairs from a mapping.");
  std::vector<JinjaValue> out;
  for (const auto& kv : v.as_dict().items()) out.push_back(JinjaValue::list({kv.first, kv.second}, true));
  return JinjaValue::iterator(std::move(out));
}

Result<JinjaValue> filter_map(const JinjaValue& v, const CallArgs& a, Budget& budget) {
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

Result<JinjaValue> filter_max(const JinjaValue& v, const CallArgs& a, Budget&) { return min_or_max(v, a, true); }

Result<JinjaValue> filter_min(const JinjaValue& v, const CallArgs& a, Budget&) { return min_or_max(v, a, false); }

Result<JinjaValue> filter_select(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  return select_or_reject(v, a, true, false, budget);
}

Result<JinjaValue> filter_reject(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  return select_or_reject(v, a, false, false, budget);
}

Result<JinjaValue> filter_selectattr(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  return select_or_reject(v, a, true, true, budget);
}

Result<JinjaValue> filter_rejectattr(const JinjaValue& v, const CallArgs& a, Budget& budget) {
  return select_or_reject(v, a, false, true, budget);
}

Result<JinjaValue> filter_reverse(const JinjaValue& v, const CallArgs& a, Budget&) {
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

Result<JinjaValue> filter_sort(const JinjaValue& v, const CallArgs& a, Budget& budget) {
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

Result<JinjaValue> filter_sum(const JinjaValue& v, const CallArgs& a, Budget& budget) {
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
      if (in_place)
        rv = rv.is_string() ? JinjaValue::string(std::move(text))
                            : JinjaValue::list(std::move(list), rv.as_list().is_tuple);
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
    return rv.is_string() ? JinjaValue::string(std::move(text))
                          : JinjaValue::list(std::move(list), rv.as_list().is_tuple);
  }
  return rv;
}

Result<JinjaValue> filter_unique(const JinjaValue& v, const CallArgs& a, Budget& budget) {
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
    } else if (key.is_integral() ||
               (key.is_float() && key.as_float() == std::trunc(key.as_float()) && std::fabs(key.as_float()) < 9e18)) {
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

}  // namespace tern::jinja
