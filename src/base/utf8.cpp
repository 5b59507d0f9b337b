// UTF-8 scanning without allocation.
#include "base/utf8.h"

namespace tern {
namespace {

// Expected length of a sequence from its lead byte; 0 for a byte that
// cannot start one.
int sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return 2;
  if (c >= 0xe0 && c <= 0xef) return 3;
  if (c >= 0xf0 && c <= 0xf4) return 4;
  return 0;
}

// Length of the valid sequence at s[i], 0 if invalid, -1 if valid so far
// but cut short by the end of s.
int valid_sequence_at(std::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int n = sequence_length(c);
  if (n <= 1) return n;
  for (int k = 1; k < n; ++k) {
    if (i + k >= s.size()) return -1;
    unsigned char d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xc0) != 0x80) return 0;
    if (k == 1) {  // second-byte ranges exclude overlongs and surrogates
      if (c == 0xe0 && d < 0xa0) return 0;
      if (c == 0xed && d > 0x9f) return 0;
      if (c == 0xf0 && d < 0x90) return 0;
      if (c == 0xf4 && d > 0x8f) return 0;
    }
  }
  return n;
}

}  // namespace

size_t utf8_complete_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    int n = valid_sequence_at(s, i);
    if (n < 0) return i;  // an incomplete tail: hold it back
    i += n == 0 ? 1 : static_cast<size_t>(n);
  }
  return i;
}

bool utf8_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    int n = valid_sequence_at(s, i);
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    int n = valid_sequence_at(s, i);
    if (n <= 0) {
      out += "\xef\xbf\xbd";
      ++i;
      continue;
    }
    out.append(s.substr(i, static_cast<size_t>(n)));
    i += static_cast<size_t>(n);
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

}  // namespace tern
