// JSON string escaping for hand-built JSON: per-token SSE chunks and error
// bodies are assembled from pre-serialized pieces around escaped text.
#pragma once

#include <string>
#include <string_view>

namespace tern::server {

// Appends `text` escaped as the inside of a JSON string (no quotes): '"', '\\'
// and control characters are escaped; other bytes, UTF-8 included, pass as is.
void append_json_escaped(std::string& out, std::string_view text);

// `text` as a quoted JSON string.
std::string json_quote(std::string_view text);

}  // namespace tern::server
