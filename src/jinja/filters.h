// jinja2's built-in filters (`x | name(...)`) and tests (`x is name(...)`)
// that chat templates use, with transformers' `tojson` (json.dumps with
// ensure_ascii=False). Each is a pure function of its arguments, charging the
// render's Budget for the data it walks. Names jinja2 knows but tern does not
// implement are reported as unsupported when a template is compiled, unknown
// names as unknown.
#pragma once

#include <string_view>

#include "base/status.h"
#include "jinja/methods.h"
#include "jinja/value.h"

namespace tern::jinja {

enum class Support : uint8_t { kSupported, kUnsupported, kUnknown };

Support filter_support(std::string_view name);
Support test_support(std::string_view name);

// Both charge `budget` for the data they walk and build, and refuse results
// past its size bounds.
Result<JinjaValue> apply_filter(std::string_view name, const JinjaValue& value, const CallArgs& args, Budget& budget);
Result<bool> apply_test(std::string_view name, const JinjaValue& value, const CallArgs& args, Budget& budget);

}  // namespace tern::jinja
