// jinja2's Lexer.tokeniter for the default delimiters with trim_blocks and
// lstrip_blocks on: the regular expressions of jinja2/lexer.py written out as
// loops, including its quirks (lstrip only at line starts, `+` to opt out,
// brackets suspend tag ends, string literals decoded like "unicode-escape").
#include "jinja/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/text.h"

namespace tern::jinja {
namespace {

constexpr std::string_view kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                           "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t p = find_tag_start(pos);
      if (p == std::string::npos) {
        emit_data(pos, src_.substr(pos));
        break;
      }
      char type = src_[p + 1];
      char sign = (p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+')) ? src_[p + 2] : 0;
      size_t raw_end = type == '%' ? match_raw_begin(p) : std::string::npos;
      std::string text = src_.substr(pos, p - pos);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+' && type != '{') {
        text = lstrip_line(text, line_starting);
      }
      emit_data(pos, std::move(text));

      if (raw_end != std::string::npos) {
        TERN_ASSIGN_OR_RETURN(pos, lex_raw(p, raw_end, &line_starting));
      } else if (type == '#') {
        TERN_ASSIGN_OR_RETURN(pos, lex_comment(p, sign ? p + 3 : p + 2, &line_starting));
      } else {
        TERN_ASSIGN_OR_RETURN(pos, lex_tag(p, type == '%', sign ? p + 3 : p + 2, &line_starting));
      }
    }
    Token eof;
    eof.kind = TokenKind::kEof;
    set_position(eof, src_.size());
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t pos) const {
    while (true) {
      size_t p = src_.find('{', pos);
      if (p == std::string::npos || p + 1 >= src_.size()) return std::string::npos;
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  // Whitespace as Python's regex `\s` sees it, at byte offset `pos`; returns
  // the byte length of the whitespace character there or 0.
  size_t ws_len(size_t pos) const {
    auto b = static_cast<unsigned char>(src_[pos]);
    if (b < 0x80) return py_isspace(b) ? 1 : 0;
    size_t len = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
    if (pos + len > src_.size()) return 0;
    std::u32string cp = decode_utf8(std::string_view(src_).substr(pos, len));
    return (cp.size() == 1 && py_isspace(cp[0])) ? len : 0;
  }

  size_t skip_ws(size_t pos) const {
    while (pos < src_.size()) {
      size_t n = ws_len(pos);
      if (n == 0) break;
      pos += n;
    }
    return pos;
  }

  static std::string rstrip_ws(const std::string& text) { return py_strip(text, std::nullopt, false, true); }

  // lstrip_blocks: drop spaces between the last line start and the tag.
  static std::string lstrip_line(const std::string& text, bool line_starting) {
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return text;
    std::string_view tail = std::string_view(text).substr(l_pos);
    if (tail.empty()) return text;
    for (char32_t c : decode_utf8(tail)) {
      if (!py_isspace(c)) return text;
    }
    return text.substr(0, l_pos);
  }

  // `{%(-|+|)\s*raw\s*(?:-%}\s*|%})` at p: the end of the match, or npos.
  size_t match_raw_begin(size_t p) const {
    size_t i = p + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    i = skip_ws(i);
    if (src_.compare(i, 3, "raw") != 0) return std::string::npos;
    i = skip_ws(i + 3);
    if (src_.compare(i, 3, "-%}") == 0) return skip_ws(i + 3);
    if (src_.compare(i, 2, "%}") == 0) return i + 2;
    return std::string::npos;
  }

  Result<size_t> lex_raw(size_t begin, size_t body, bool* line_starting) {
    *line_starting = src_[body - 1] == '\n';
    size_t search = body;
    while (true) {
      size_t p = src_.find("{%", search);
      if (p == std::string::npos) return error_at(begin, ErrorCode::kParse, "missing end of raw directive");
      size_t i = p + 2;
      char sign = 0;
      if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) sign = src_[i++];
      i = skip_ws(i);
      if (src_.compare(i, 6, "endraw") != 0) {
        search = p + 2;
        continue;
      }
      i = skip_ws(i + 6);
      size_t end;
      if (src_.compare(i, 3, "+%}") == 0) {
        end = i + 3;
      } else if (src_.compare(i, 3, "-%}") == 0) {
        end = skip_ws(i + 3);
      } else if (src_.compare(i, 2, "%}") == 0) {
        end = i + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        search = p + 2;
        continue;
      }
      std::string text = src_.substr(body, p - body);
      if (sign == '-') {
        text = rstrip_ws(text);
      } else if (sign != '+') {
        text = lstrip_line(text, *line_starting);
      }
      emit_data(body, std::move(text));
      *line_starting = src_[end - 1] == '\n';
      return end;
    }
  }

  Result<size_t> lex_comment(size_t begin, size_t body, bool* line_starting) {
    size_t q = src_.find("#}", body);
    if (q == std::string::npos) return error_at(begin, ErrorCode::kParse, "missing end of comment tag");
    char sign = (q > body && (src_[q - 1] == '-' || src_[q - 1] == '+')) ? src_[q - 1] : 0;
    size_t end = q + 2;
    if (sign == '-') {
      end = skip_ws(end);
    } else if (sign == 0 && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    *line_starting = src_[end - 1] == '\n';
    return end;
  }

  Result<size_t> lex_tag(size_t begin, bool block, size_t pos, bool* line_starting) {
    Token open;
    open.kind = block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin;
    set_position(open, begin);
    tokens_.push_back(std::move(open));
    std::vector<char> balance;
    while (true) {
      if (pos >= src_.size()) {
        return error_at(begin, ErrorCode::kParse,
                        std::string("unexpected end of template: tag '") + (block ? "{%" : "{{") + "' is never closed");
      }
      if (balance.empty()) {
        size_t end = match_tag_end(pos, block);
        if (end != std::string::npos) {
          Token close;
          close.kind = block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd;
          set_position(close, pos);
          tokens_.push_back(std::move(close));
          *line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      size_t ws = ws_len(pos);
      if (ws > 0) {
        pos += ws;
        continue;
      }
      Token t;
      set_position(t, pos);
      size_t next = pos;
      TERN_ASSIGN_OR_RETURN(next, lex_operand(pos, t));
      if (next == pos) {
        std::string_view op = match_operator(pos);
        if (op.empty()) {
          std::u32string cp = decode_utf8(std::string_view(src_).substr(pos, 4));
          std::string shown;
          append_utf8(shown, cp.empty() ? U'?' : cp[0]);
          return error_at(pos, ErrorCode::kParse, "unexpected char '" + shown + "'");
        }
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) return error_at(pos, ErrorCode::kParse, "unexpected '" + std::string(op) + "'");
          if (balance.back() != op[0]) {
            return error_at(pos, ErrorCode::kParse,
                            "unexpected '" + std::string(op) + "', expected '" + std::string(1, balance.back()) + "'");
          }
          balance.pop_back();
        }
        t.kind = TokenKind::kOperator;
        t.text = std::string(op);
        next = pos + op.size();
      }
      tokens_.push_back(std::move(t));
      pos = next;
    }
  }

  size_t match_tag_end(size_t pos, bool block) const {
    if (block) {
      if (src_.compare(pos, 3, "+%}") == 0) return pos + 3;
      if (src_.compare(pos, 3, "-%}") == 0) return skip_ws(pos + 3);
      if (src_.compare(pos, 2, "%}") == 0) {
        size_t end = pos + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
        return end;
      }
      return std::string::npos;
    }
    if (src_.compare(pos, 3, "-}}") == 0) return skip_ws(pos + 3);
    if (src_.compare(pos, 2, "}}") == 0) return pos + 2;
    return std::string::npos;
  }

  std::string_view match_operator(size_t pos) const {
    for (std::string_view op : kOperators) {
      if (src_.compare(pos, op.size(), op) == 0) return op;
    }
    return {};
  }

  // Digits with single `_` separators: `(\d+_)*\d+`. Returns the end or pos.
  size_t match_digits(size_t pos) const {
    size_t i = pos;
    if (i >= src_.size() || !is_digit(src_[i])) return pos;
    while (true) {
      while (i < src_.size() && is_digit(src_[i])) ++i;
      if (i + 1 < src_.size() && src_[i] == '_' && is_digit(src_[i + 1])) {
        ++i;
        continue;
      }
      return i;
    }
  }

  // Float, integer, name or string at pos; sets `t` and returns the end, or
  // returns pos when none matches.
  Result<size_t> lex_operand(size_t pos, Token& t) {
    char c = src_[pos];
    if (is_digit(c)) {
      if (pos == 0 || src_[pos - 1] != '.') {
        size_t f = match_float(pos);
        if (f != pos) {
          std::string digits;
          for (size_t i = pos; i < f; ++i) {
            if (src_[i] != '_') digits += src_[i];
          }
          t.kind = TokenKind::kFloat;
          t.float_value = std::strtod(digits.c_str(), nullptr);
          return f;
        }
      }
      return lex_integer(pos, t);
    }
    if (is_name_start(c)) {
      size_t i = pos;
      while (i < src_.size() && is_name_char(src_[i])) ++i;
      t.kind = TokenKind::kName;
      t.text = src_.substr(pos, i - pos);
      return i;
    }
    if (c == '\'' || c == '"') return lex_string(pos, t);
    return pos;
  }

  size_t match_float(size_t pos) const {
    size_t i = match_digits(pos);
    bool fraction = false;
    if (i < src_.size() && src_[i] == '.') {
      size_t f = match_digits(i + 1);
      if (f != i + 1) {
        fraction = true;
        i = f;
      }
    }
    if (i < src_.size() && (src_[i] == 'e' || src_[i] == 'E')) {
      size_t e = i + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      size_t d = match_digits(e);
      if (d != e) return d;
    }
    return fraction ? i : pos;
  }

  Result<size_t> lex_integer(size_t pos, Token& t) {
    int base = 10;
    size_t i = pos;
    if (src_[pos] == '0' && pos + 1 < src_.size()) {
      char x = static_cast<char>(src_[pos + 1] | 0x20);
      if (x == 'b') base = 2;
      if (x == 'o') base = 8;
      if (x == 'x') base = 16;
    }
    std::string digits;
    auto is_base_digit = [&](char ch) {
      if (base == 2) return ch == '0' || ch == '1';
      if (base == 8) return ch >= '0' && ch <= '7';
      if (base == 16) return is_digit(ch) || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f');
      return is_digit(ch);
    };
    if (base != 10) {
      i = pos + 2;
      while (i < src_.size()) {
        if (src_[i] == '_' && i + 1 < src_.size() && is_base_digit(src_[i + 1])) ++i;
        if (!is_base_digit(src_[i])) break;
        digits += src_[i++];
      }
      if (digits.empty()) {  // "0x" without digits: jinja2 lexes the 0 alone
        base = 10;
        i = pos;
      }
    }
    if (base == 10) {
      if (src_[pos] == '0') {
        i = pos + 1;  // `0(_?0)*`
        while (i < src_.size()) {
          if (src_[i] == '0') {
            ++i;
          } else if (src_[i] == '_' && i + 1 < src_.size() && src_[i + 1] == '0') {
            i += 2;
          } else {
            break;
          }
        }
        digits = "0";
      } else {
        i = match_digits(pos);
        for (size_t k = pos; k < i; ++k) {
          if (src_[k] != '_') digits += src_[k];
        }
      }
    }
    errno = 0;
    char* end = nullptr;
    unsigned long long v = std::strtoull(digits.c_str(), &end, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) {
      return error_at(pos, ErrorCode::kUnsupported, "integer literal too large");
    }
    t.kind = TokenKind::kInteger;
    t.int_value = static_cast<int64_t>(v);
    return i;
  }

  Result<size_t> lex_string(size_t pos, Token& t) {
    char quote = src_[pos];
    size_t i = pos + 1;
    while (i < src_.size() && src_[i] != quote) {
      if (src_[i] == '\\') ++i;
      ++i;
    }
    if (i >= src_.size()) return pos;  // jinja2: no string match, then "unexpected char"
    TERN_ASSIGN_OR_RETURN(t.text, unescape(pos, std::string_view(src_).substr(pos + 1, i - pos - 1)));
    t.kind = TokenKind::kString;
    return i + 1;
  }

  static int hex_value(char c) {
    if (is_digit(c)) return c - '0';
    c = static_cast<char>(c | 0x20);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }

  // Python's "unicode-escape" decoding of the literal's body.
  Result<std::string> unescape(size_t pos, std::string_view body) {
    std::string out;
    size_t i = 0;
    while (i < body.size()) {
      char c = body[i];
      if (c != '\\' || i + 1 >= body.size()) {
        out += c;
        ++i;
        continue;
      }
      char e = body[i + 1];
      i += 2;
      switch (e) {
        case '\n':
          continue;
        case '\\':
          out += '\\';
          continue;
        case '\'':
          out += '\'';
          continue;
        case '"':
          out += '"';
          continue;
        case 'a':
          out += '\a';
          continue;
        case 'b':
          out += '\b';
          continue;
        case 'f':
          out += '\f';
          continue;
        case 'n':
          out += '\n';
          continue;
        case 'r':
          out += '\r';
          continue;
        case 't':
          out += '\t';
          continue;
        case 'v':
          out += '\v';
          continue;
        default:
          break;
      }
      if (e >= '0' && e <= '7') {
        unsigned v = static_cast<unsigned>(e - '0');
        for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k) {
          v = v * 8 + static_cast<unsigned>(body[i++] - '0');
        }
        append_utf8(out, v);
        continue;
      }
      if (e == 'x' || e == 'u' || e == 'U') {
        size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (size_t k = 0; k < n; ++k) {
          int h = i + k < body.size() ? hex_value(body[i + k]) : -1;
          if (h < 0)
            return error_at(pos, ErrorCode::kParse, std::string("truncated \\") + e + " escape in string literal");
          v = v * 16 + static_cast<uint32_t>(h);
        }
        if (v > 0x10FFFF) return error_at(pos, ErrorCode::kParse, "illegal Unicode character in string literal");
        i += n;
        append_utf8(out, v);
        continue;
      }
      if (e == 'N') return error_at(pos, ErrorCode::kUnsupported, "\\N{...} escapes are not supported");
      out += '\\';
      if (static_cast<unsigned char>(e) >= 0x80) {
        // backslashreplace turned the character into an escape that stays literal
        size_t start = i - 1;
        size_t len = 1;
        while (start + len < body.size() && (static_cast<unsigned char>(body[start + len]) & 0xC0) == 0x80) ++len;
        std::u32string cp = decode_utf8(body.substr(start, len));
        char buf[16];
        unsigned v = cp.empty() ? 0 : static_cast<unsigned>(cp[0]);
        std::snprintf(buf, sizeof(buf), v <= 0xFF ? "\\x%02x" : v <= 0xFFFF ? "\\u%04x" : "\\U%08x", v);
        out += buf;
        i = start + len;
        continue;
      }
      out += e;
    }
    return out;
  }

  void emit_data(size_t pos, std::string text) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kData;
    set_position(t, pos);
    t.text = std::move(text);
    tokens_.push_back(std::move(t));
  }

  void set_position(Token& t, size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    size_t line = static_cast<size_t>(it - line_starts_.begin());
    t.line = static_cast<uint32_t>(line);
    t.column = static_cast<uint32_t>(pos - line_starts_[line - 1] + 1);
  }

  Status error_at(size_t pos, ErrorCode code, std::string_view message) const {
    Token t;
    set_position(t, pos);
    return template_error(code, t.line, t.column, message);
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

Status template_error(ErrorCode code, uint32_t line, uint32_t column, std::string_view message) {
  return Status(code, "chat template line " + std::to_string(line) + ", column " + std::to_string(column) + ": " +
                          std::string(message));
}

Result<std::vector<Token>> tokenize(std::string_view source) {
  if (source.size() > kMaxTemplateBytes) {
    return out_of_range("chat template is " + std::to_string(source.size()) + " bytes, more than the limit of " +
                        std::to_string(kMaxTemplateBytes));
  }
  // Newlines become "\n" and one trailing newline is dropped, as jinja2 does.
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src)).run();
}

}  // namespace tern::jinja
