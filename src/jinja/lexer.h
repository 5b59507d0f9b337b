// Tokenizer for chat templates, a port of jinja2's Lexer with the settings
// transformers uses (trim_blocks, lstrip_blocks, no trailing newline kept):
// template text becomes data tokens with whitespace control applied, and
// `{{ }}` / `{% %}` contents become expression tokens. Comments vanish and
// `{% raw %}` bodies become data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tern::jinja {

enum class TokenKind : uint8_t {
  kData,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;  // data, name, operator symbol, or the decoded string literal
  int64_t int_value = 0;
  double float_value = 0;
  uint32_t line = 1;
  uint32_t column = 1;
};

// Largest template accepted (bytes).
inline constexpr size_t kMaxTemplateBytes = 1 << 20;

Result<std::vector<Token>> tokenize(std::string_view source);

// "chat template line 3, column 5: " + message, with the given code.
Status template_error(ErrorCode code, uint32_t line, uint32_t column, std::string_view message);

}  // namespace tern::jinja
