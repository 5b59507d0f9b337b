// The filters of jinja2 that walk sequences and mappings (map, select,
// selectattr, sort, unique, join, sum, first, ...), split out of
// filters.cpp, which registers them. Internal to the template engine.
#pragma once

#include <string>

#include "base/status.h"
#include "jinja/methods.h"
#include "jinja/text.h"
#include "jinja/value.h"

namespace tern::jinja {

using FilterFn = Result<JinjaValue> (*)(const JinjaValue&, const CallArgs&, Budget&);

// Helpers shared with filters.cpp.
inline Status type_error(std::string m) { return invalid_argument(std::move(m)); }
inline bool flag(const ArgBinder& b, size_t i) { return b.get(i) != nullptr && b.get(i)->truthy(); }
inline JinjaValue ignore_case(const JinjaValue& v) {
  return v.is_string() ? JinjaValue::string(py_lower(v.as_string())) : v;
}

Result<JinjaValue> filter_batch(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_dictsort(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_first(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_last(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_join(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_list(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_items(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_map(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_max(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_min(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_select(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_reject(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_selectattr(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_rejectattr(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_reverse(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_sort(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_sum(const JinjaValue& v, const CallArgs& a, Budget& budget);
Result<JinjaValue> filter_unique(const JinjaValue& v, const CallArgs& a, Budget& budget);

}  // namespace tern::jinja
