// Request bodies as JSON, parsed with bounds: nesting deeper than
// kMaxRequestJsonDepth is refused before nlohmann builds anything (copying,
// comparing, dumping and rendering a parsed value recurse, so a body of
// 10^6 brackets would overflow an io thread's stack later), and a syntax
// error names its byte offset and what was wrong. Stateless, thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <variant>

namespace tern::server {

inline constexpr int kMaxRequestJsonDepth = 64;

// The byte offset of the bracket that opens level `max_depth` + 1 of `text`,
// or npos when nothing nests that deep. Brackets inside strings do not count;
// the text need not be valid JSON.
size_t json_depth_exceeded_at(std::string_view text, int max_depth = kMaxRequestJsonDepth);

// The parsed body, or the message of a 400: "the request body is not valid
// JSON: ... at byte N" or "... nests deeper than 64 levels ...".
std::variant<nlohmann::json, std::string> parse_request_json(std::string_view body);

// A response body or SSE payload: compact, invalid UTF-8 replaced by U+FFFD,
// and U+0085, U+2028, U+2029 written as \u escapes (json_escape.h says why).
std::string dump_json(const nlohmann::json& j);

}  // namespace tern::server
