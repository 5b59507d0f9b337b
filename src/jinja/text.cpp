// Python str semantics on UTF-8 strings (see text.h). Case mapping
// covers ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic, Armenian and
// fullwidth Latin; other scripts pass through unchanged.
#include "jinja/text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "base/utf8.h"

namespace tern::jinja {
namespace {

char32_t upper_cp(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c == 0xB5) return 0x39C;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 0x20;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x137) return c & ~char32_t{1};
  if (c == 0x131) return 'I';
  if (c >= 0x139 && c <= 0x148) return (c & 1) ? c : c - 1;
  if (c >= 0x14A && c <= 0x177) return c & ~char32_t{1};
  if (c >= 0x179 && c <= 0x17E) return (c & 1) ? c : c - 1;
  if (c == 0x17F) return 'S';
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 0x20;
  if (c == 0x3C2) return 0x3A3;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 0x25;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 0x3F;
  if (c >= 0x430 && c <= 0x44F) return c - 0x20;
  if (c >= 0x450 && c <= 0x45F) return c - 0x50;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) return c & ~char32_t{1};
  if (c >= 0x561 && c <= 0x586) return c - 0x30;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 0x20;
  return c;
}

char32_t lower_cp(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
  if (c >= 0x100 && c <= 0x137 && c != 0x130) return c | 1;
  if (c >= 0x139 && c <= 0x148) return (c & 1) ? c + 1 : c;
  if (c >= 0x14A && c <= 0x177) return c | 1;
  if (c == 0x178) return 0xFF;
  if (c >= 0x179 && c <= 0x17E) return (c & 1) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 0x25;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 0x3F;
  if (c >= 0x410 && c <= 0x42F) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF)) return c | 1;
  if (c >= 0x531 && c <= 0x556) return c + 0x30;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 0x20;
  return c;
}

bool is_cased(char32_t c) { return upper_cp(c) != c || lower_cp(c) != c || c == 0xDF; }

void append_upper(std::string& out, char32_t c) {
  if (c == 0xDF) {  // sharp s uppercases to two letters
    out += "SS";
    return;
  }
  append_utf8(out, upper_cp(c));
}

void append_lower(std::string& out, char32_t c) {
  if (c == 0x130) {  // dotted capital I lowercases to i + combining dot
    out += "i";
    append_utf8(out, 0x307);
    return;
  }
  append_utf8(out, lower_cp(c));
}

bool in_chars(char32_t c, const std::u32string* chars) {
  if (chars == nullptr) return py_isspace(c);
  return chars->find(c) != std::u32string::npos;
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

}  // namespace

void append_utf8(std::string& out, char32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF) {  // surrogateescape: the original raw byte
    out += static_cast<char>(cp - 0xDC00);
  } else {
    utf8_append(out, cp);
  }
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    char32_t cp = 0;
    if (b0 < 0x80) {
      len = 1;
      cp = b0;
    } else if (b0 >= 0xC2 && b0 <= 0xDF) {
      len = 2;
      cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      len = 3;
      cp = b0 & 0x0F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      len = 4;
      cp = b0 & 0x07;
    }
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (ok && len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
    if (ok && len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ok = false;
    if (!ok) {
      out += static_cast<char32_t>(0xDC00 + b0);
      i += 1;
    } else {
      out += cp;
      i += len;
    }
  }
  return out;
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return decode_utf8(s).size();
  }
  return s.size();
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool py_isprintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return false;
  if (c < 0x300) return true;
  if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x890 || c == 0x891 || c == 0x8E2 ||
      c == 0x180E || c == 0x1680)
    return false;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x2064) ||
      (c >= 0x2066 && c <= 0x206F) || c == 0x3000)
    return false;
  if ((c >= 0xD800 && c <= 0xF8FF) || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB)) return false;
  if ((c >= 0xFDD0 && c <= 0xFDEF) || (c & 0xFFFE) == 0xFFFE) return false;
  if (c == 0x110BD || c == 0x110CD || (c >= 0x13430 && c <= 0x1343F) || (c >= 0x1BCA0 && c <= 0x1BCA3) ||
      (c >= 0x1D173 && c <= 0x1D17A) || (c >= 0xE0000 && c <= 0xE0FFF) || c >= 0xF0000)
    return false;
  return true;
}

bool py_isalpha(char32_t c) {
  struct Range {
    char32_t lo, hi;
  };
  static constexpr Range kAlpha[] = {
      {'A', 'Z'},         {'a', 'z'},         {0xAA, 0xAA},       {0xB5, 0xB5},       {0xBA, 0xBA},
      {0xC0, 0xD6},       {0xD8, 0xF6},       {0xF8, 0x2C1},      {0x2C6, 0x2D1},     {0x2E0, 0x2E4},
      {0x2EC, 0x2EC},     {0x2EE, 0x2EE},     {0x370, 0x374},     {0x376, 0x37D},     {0x37F, 0x37F},
      {0x386, 0x386},     {0x388, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},     {0x531, 0x556},
      {0x559, 0x559},     {0x560, 0x588},     {0x5D0, 0x5EA},     {0x5EF, 0x5F2},     {0x620, 0x64A},
      {0x66E, 0x66F},     {0x671, 0x6D3},     {0x6D5, 0x6D5},     {0x6E5, 0x6E6},     {0x6EE, 0x6EF},
      {0x6FA, 0x6FC},     {0x6FF, 0x6FF},     {0x904, 0x939},     {0x93D, 0x93D},     {0x950, 0x950},
      {0x958, 0x961},     {0x971, 0x980},     {0xE01, 0xE30},     {0xE32, 0xE33},     {0xE40, 0xE46},
      {0x10A0, 0x10C5},   {0x10D0, 0x10FA},   {0x10FC, 0x1248},   {0x1100, 0x11FF},   {0x1E00, 0x1F15},
      {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F7D},
      {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
      {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},   {0x2071, 0x2071},
      {0x207F, 0x207F},   {0x2090, 0x209C},   {0x2C00, 0x2CE4},   {0x3005, 0x3006},   {0x3031, 0x3035},
      {0x303B, 0x303C},   {0x3041, 0x3096},   {0x309D, 0x309F},   {0x30A1, 0x30FA},   {0x30FC, 0x30FF},
      {0x3105, 0x312F},   {0x3131, 0x318E},   {0x31A0, 0x31BF},   {0x31F0, 0x31FF},   {0x3400, 0x4DBF},
      {0x4E00, 0x9FFF},   {0xA000, 0xA48C},   {0xAC00, 0xD7A3},   {0xF900, 0xFA6D},   {0xFA70, 0xFAD9},
      {0xFB00, 0xFB06},   {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},   {0xFF66, 0xFFBE},   {0x10000, 0x1000B},
      {0x1D400, 0x1D6A5}, {0x20000, 0x2A6DF}, {0x2A700, 0x2EBE0}, {0x2F800, 0x2FA1D}, {0x30000, 0x3134A},
  };
  for (const Range& r : kAlpha) {
    if (c < r.lo) return false;
    if (c <= r.hi) return true;
  }
  return false;
}

bool py_isnumeric(char32_t c) {
  return (c >= '0' && c <= '9') || c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0xBC && c <= 0xBE) ||
         (c >= 0x660 && c <= 0x669) || (c >= 0x6F0 && c <= 0x6F9) || (c >= 0x966 && c <= 0x96F) ||
         (c >= 0xE50 && c <= 0xE59) || (c >= 0x2070 && c <= 0x2079 && c != 0x2071 && c != 0x2072 && c != 0x2073) ||
         (c >= 0x2080 && c <= 0x2089) || (c >= 0x2150 && c <= 0x2189) || (c >= 0x2460 && c <= 0x249B) ||
         (c >= 0x24EA && c <= 0x24FF) || c == 0x3007 || (c >= 0x3021 && c <= 0x3029) || (c >= 0x3220 && c <= 0x3229) ||
         (c >= 0xFF10 && c <= 0xFF19);
}

std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : decode_utf8(s)) append_upper(out, c);
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : decode_utf8(s)) append_lower(out, c);
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  std::u32string cps = decode_utf8(s);
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) {
      append_upper(out, cps[i]);
    } else {
      append_lower(out, cps[i]);
    }
  }
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : decode_utf8(s)) {
    if (previous_cased) {
      append_lower(out, c);
    } else {
      append_upper(out, c);
    }
    previous_cased = is_cased(c);
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  // re.split(r"([-\s({\[<]+)") then item[0].upper() + item[1:].lower().
  std::string out;
  bool word_start = true;
  for (char32_t c : decode_utf8(s)) {
    bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
    if (sep) {
      append_utf8(out, c);
      word_start = true;
    } else if (word_start) {
      append_upper(out, c);
      word_start = false;
    } else {
      append_lower(out, c);
    }
  }
  return out;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string cps = decode_utf8(s);
  std::u32string set;
  const std::u32string* set_ptr = nullptr;
  if (chars) {
    set = decode_utf8(*chars);
    set_ptr = &set;
  }
  size_t b = 0;
  size_t e = cps.size();
  if (left) {
    while (b < e && in_chars(cps[b], set_ptr)) ++b;
  }
  if (right) {
    while (e > b && in_chars(cps[e - 1], set_ptr)) --e;
  }
  return encode_utf8(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<long>(out.size()) < maxsplit) {
      size_t next = s.find(*sep, pos);
      if (next == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, next - pos));
      pos = next + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string cps = decode_utf8(s);
  size_t i = 0;
  while (true) {
    while (i < cps.size() && py_isspace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<long>(out.size()) >= maxsplit) {
      out.push_back(encode_utf8(std::u32string_view(cps).substr(i)));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !py_isspace(cps[j])) ++j;
    out.push_back(encode_utf8(std::u32string_view(cps).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<long>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t next = s.rfind(*sep, end - sep->size());
      if (next == std::string_view::npos) break;
      out.emplace_back(s.substr(next + sep->size(), end - next - sep->size()));
      end = next;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::u32string cps = decode_utf8(s);
    size_t j = cps.size();
    while (true) {
      while (j > 0 && py_isspace(cps[j - 1])) --j;
      if (j == 0) break;
      if (maxsplit >= 0 && static_cast<long>(out.size()) >= maxsplit) {
        out.push_back(encode_utf8(std::u32string_view(cps).substr(0, j)));
        break;
      }
      size_t i = j;
      while (i > 0 && !py_isspace(cps[i - 1])) --i;
      out.push_back(encode_utf8(std::u32string_view(cps).substr(i, j - i)));
      j = i;
    }
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  std::u32string cps = decode_utf8(s);
  size_t start = 0;
  size_t i = 0;
  while (i < cps.size()) {
    if (!is_line_break(cps[i])) {
      ++i;
      continue;
    }
    size_t brk = (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ? 2 : 1;
    size_t end = keepends ? i + brk : i;
    out.push_back(encode_utf8(std::u32string_view(cps).substr(start, end - start)));
    i += brk;
    start = i;
  }
  if (start < cps.size()) out.push_back(encode_utf8(std::u32string_view(cps).substr(start)));
  return out;
}

std::optional<std::string> py_replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                                      long count, size_t max_size) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new` before every code point and at the end.
    std::u32string cps = decode_utf8(s);
    size_t inserts = cps.size() + 1;
    if (count >= 0) inserts = std::min(inserts, static_cast<size_t>(count));
    if (!new_text.empty() && inserts > (max_size - std::min(max_size, s.size())) / new_text.size()) return std::nullopt;
    size_t done = 0;
    for (char32_t c : cps) {
      if (done < inserts) {
        out += new_text;
        ++done;
      }
      append_utf8(out, c);
    }
    if (done < inserts) out += new_text;
    return out;
  }
  size_t pos = 0;
  long done = 0;
  while (count < 0 || done < count) {
    size_t next = s.find(old_text, pos);
    if (next == std::string_view::npos) break;
    out += s.substr(pos, next - pos);
    out += new_text;
    if (out.size() > max_size) return std::nullopt;
    pos = next + old_text.size();
    ++done;
  }
  out += s.substr(pos);
  if (out.size() > max_size) return std::nullopt;
  return out;
}

std::string py_repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode_utf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c >= 0xDC80 && c <= 0xDCFF) {
      char buf[12];
      std::snprintf(buf, sizeof(buf), "\\udc%02x", static_cast<unsigned>(c - 0xDC00));
      out += buf;
    } else if (!py_isprintable(c)) {
      char buf[16];
      if (c <= 0xFF) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      } else if (c <= 0xFFFF) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      append_utf8(out, c);
    }
  }
  out += quote;
  return out;
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  size_t i = 0;
  if (sci[0] == '-') {
    out += '-';
    i = 1;
  }
  size_t e = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  int exponent = std::atoi(sci.c_str() + e + 1);
  int decpt = exponent + 1;  // value = 0.DIGITS * 10^decpt
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += ebuf;
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out += digits;
    out.append(static_cast<size_t>(decpt) - digits.size(), '0');
    out += ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt));
    out += '.';
    out += digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

}  // namespace tern::jinja
