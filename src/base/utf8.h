// UTF-8 helpers for streaming text: how much of a byte string is whole
// characters, and validation. Used by the detokenizer so a character split
// over byte-fallback tokens is emitted once, complete.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tern {

// Length of the longest prefix of `s` that does not end inside a
// multi-byte character. Invalid bytes count as complete (one byte each) so
// a stream never stalls on garbage.
size_t utf8_complete_prefix(std::string_view s);

// True when `s` is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF).
bool utf8_valid(std::string_view s);

// Replaces each invalid sequence with U+FFFD (used only at the very end of a
// stream, never mid-stream).
std::string utf8_sanitize(std::string_view s);

// Appends the UTF-8 encoding of code point `cp`.
void utf8_append(std::string& out, char32_t cp);

}  // namespace tern
