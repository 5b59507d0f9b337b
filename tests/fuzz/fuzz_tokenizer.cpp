// libFuzzer target for the tokenizer on arbitrary bytes, with the tiny test
// model's tokenizer (tests/data/ernie-tiny). Byte 0 picks the mode:
//   bit 0 clear: the rest is text. encode gives ids in [0, vocab_size); for
//     valid UTF-8, decode(encode(text)) without skipping special tokens gives the
//     text back, U+2581 (SentencePiece's space symbol) read as ' ' as HF does;
//     for invalid UTF-8 the same holds for utf8_sanitize(text).
//   bit 0 set: the rest is little-endian 16-bit ids (mod vocab_size), so byte
//     fallback pieces arrive split anyhow.
// In both modes the ids also go through the streaming Detokenizer (bit 1:
// skip special tokens): every piece it emits is valid UTF-8, and the pieces
// plus flush() equal utf8_sanitize(decode(ids)). A violation traps.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "base/utf8.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

const tern::Tokenizer& tokenizer() {
  static const tern::Tokenizer tok = [] {
    auto t = tern::Tokenizer::load(TERN_FUZZ_TOKENIZER_DIR);
    if (!t.is_ok()) std::abort();
    return std::move(t).value();
  }();
  return tok;
}

// What decode gives back for `text`: HF decodes U+2581 as a space.
std::string expected_round_trip(std::string_view text) {
  std::string out;
  constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, 3) == kSpaceSymbol) {
      out += ' ';
      i += 3;
    } else {
      out += text[i++];
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  (void)tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const tern::Tokenizer& tok = tokenizer();
  const int32_t vocab = tok.vocab_size();
  const bool ids_mode = data[0] & 1;
  const bool skip_special = data[0] & 2;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);

  std::vector<int32_t> ids;
  if (ids_mode) {
    for (size_t i = 0; i + 1 < rest.size(); i += 2) {
      const unsigned v = static_cast<uint8_t>(rest[i]) | static_cast<unsigned>(static_cast<uint8_t>(rest[i + 1])) << 8;
      ids.push_back(static_cast<int32_t>(v % static_cast<unsigned>(vocab)));
    }
  } else {
    ids = tok.encode(rest, /*add_special_tokens=*/false);
    for (int32_t id : ids) check(id >= 0 && id < vocab);
    const std::string text = tern::utf8_valid(rest) ? std::string(rest) : tern::utf8_sanitize(rest);
    check(tok.decode(ids, /*skip_special_tokens=*/false) == expected_round_trip(text));
    for (int32_t id : tok.encode(rest, /*add_special_tokens=*/true)) check(id >= 0 && id < vocab);
  }

  tern::Detokenizer detok(tok, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = detok.push(id);
    check(tern::utf8_valid(piece));
    streamed += piece;
  }
  const std::string tail = detok.flush();
  check(tern::utf8_valid(tail));
  streamed += tail;
  check(streamed == tern::utf8_sanitize(tok.decode(ids, skip_special)));
  return 0;
}
