// Python str semantics on UTF-8 std::string for the Jinja engine: code point
// decoding, str.isspace, case mapping, strip/split and the repr() of str and
// float, so templates render the bytes Python's jinja2 renders. Invalid UTF-8
// bytes survive round trips (surrogateescape, as Python's os APIs do).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tern::jinja {

// Code points of `s`; an invalid byte b decodes to U+DC00+b.
std::u32string decode_utf8(std::string_view s);
// Inverse of decode_utf8 (U+DC80..U+DCFF become the raw byte again).
std::string encode_utf8(std::u32string_view s);
void append_utf8(std::string& out, char32_t cp);
size_t utf8_length(std::string_view s);

// Python's str.isspace() for one code point (also what `\s` matches in re).
bool py_isspace(char32_t cp);
bool py_isprintable(char32_t cp);
// str.isalpha() / str.isnumeric() per code point, for the common scripts
// (Latin, Greek, Cyrillic, Hebrew, Arabic, Thai, CJK, Hangul, ...).
bool py_isalpha(char32_t cp);
bool py_isnumeric(char32_t cp);

std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string py_title(std::string_view s);       // str.title()
std::string jinja_title(std::string_view s);    // the `title` filter (word starts after -, space, ( { [ <)

// str.strip/lstrip/rstrip; `chars` empty optional = whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep, maxsplit) and str.rsplit; no sep = runs of whitespace.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, long maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, long maxsplit);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
// str.replace(old, new, count); count < 0 = all. nullopt when the result
// would exceed max_size bytes.
std::optional<std::string> py_replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                                      long count, size_t max_size);

// repr(str): quotes and escapes as CPython does.
std::string py_repr_string(std::string_view s);
// repr(float) / str(float): shortest round trip, "1.0", "1e+16", "inf", "nan".
std::string py_float_repr(double d);

}  // namespace tern::jinja
