// JSON in and out of the Jinja engine. In: nlohmann JSON to JinjaValue as
// Python's json.loads builds it (use ordered_json to keep key order, as
// Python dicts do). Out: Python's json.dumps(ensure_ascii=False), the
// `tojson` filter transformers installs, byte for byte.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>

#include "base/status.h"
#include "jinja/value.h"

namespace tern {

// Fails only on nesting deeper than kJinjaMaxNesting.
Result<JinjaValue> jinja_from_json(const nlohmann::ordered_json& j);
Result<JinjaValue> jinja_from_json(const nlohmann::json& j);

namespace jinja {

struct JsonDumpOptions {
  std::optional<std::string> indent;  // json.dumps(indent=...) already turned into its string
  bool ensure_ascii = false;
  bool sort_keys = false;
  // (item, key) separators; default (", ", ": ") or (",", ": ") with indent.
  std::optional<std::pair<std::string, std::string>> separators;
};

// TypeError for values JSON cannot hold (undefined, namespace, callable).
Result<std::string> json_dumps(const JinjaValue& v, const JsonDumpOptions& options, size_t max_size);

}  // namespace jinja
}  // namespace tern
