// JSON string escaping for hand-built JSON: per-token SSE chunks and error
// bodies are assembled from pre-serialized pieces around escaped text.
#pragma once

#include <string>
#include <string_view>

namespace tern::server {

// Appends `text` escaped as the inside of a JSON string (no quotes): '"', '\\',
// control characters and the Unicode line breaks U+0085, U+2028 and U+2029 are
// escaped; other bytes, UTF-8 included, pass as is. JSON allows those three
// raw, but line readers (Python's str.splitlines, requests' iter_lines, some
// JavaScript) split on them and would cut an SSE event in two.
void append_json_escaped(std::string& out, std::string_view text);

// Rewrites the raw UTF-8 of U+0085, U+2028 and U+2029 in serialized JSON as
// \u escapes (they can only occur inside its strings), in place.
void escape_unicode_line_breaks(std::string& json);

// `text` as a quoted JSON string.
std::string json_quote(std::string_view text);

}  // namespace tern::server
