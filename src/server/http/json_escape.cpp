// JSON string escaping: a fast path copies runs of plain bytes at once.
#include "server/http/json_escape.h"

namespace tern::server {

namespace {

bool needs_escape(unsigned char c) { return c < 0x20 || c == '"' || c == '\\'; }

// The UTF-8 of U+0085 (C2 85), U+2028 (E2 80 A8) and U+2029 (E2 80 A9) at
// text[i]: its length, and its escape in `esc`; 0 when it is none of them.
size_t unicode_line_break_at(std::string_view text, size_t i, const char*& esc) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(text[i + k]); };
  if (at(0) == 0xC2 && i + 1 < text.size() && at(1) == 0x85) {
    esc = "\\u0085";
    return 2;
  }
  if (at(0) == 0xE2 && i + 2 < text.size() && at(1) == 0x80 && (at(2) == 0xA8 || at(2) == 0xA9)) {
    esc = at(2) == 0xA8 ? "\\u2028" : "\\u2029";
    return 3;
  }
  return 0;
}

}  // namespace

void append_json_escaped(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  size_t run = 0;  // start of the pending run of plain bytes
  for (size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c == 0xC2 || c == 0xE2) {
      const char* esc = nullptr;
      if (size_t n = unicode_line_break_at(text, i, esc)) {
        out.append(text.data() + run, i - run);
        out += esc;
        i += n - 1;
        run = i + 1;
      }
      continue;
    }
    if (!needs_escape(c)) continue;
    out.append(text.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xf]};
        out.append(esc, 6);
      }
    }
  }
  out.append(text.data() + run, text.size() - run);
}

void escape_unicode_line_breaks(std::string& json) {
  size_t i = json.find_first_of("\xC2\xE2");
  if (i == std::string::npos) return;
  std::string out(json, 0, i);
  size_t run = i;
  for (; i < json.size(); ++i) {
    auto c = static_cast<unsigned char>(json[i]);
    if (c != 0xC2 && c != 0xE2) continue;
    const char* esc = nullptr;
    if (size_t n = unicode_line_break_at(json, i, esc)) {
      out.append(json, run, i - run);
      out += esc;
      i += n - 1;
      run = i + 1;
    }
  }
  out.append(json, run, std::string::npos);
  json = std::move(out);
}

std::string json_quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.push_back('"');
  append_json_escaped(out, text);
  out.push_back('"');
  return out;
}

}  // namespace tern::server
