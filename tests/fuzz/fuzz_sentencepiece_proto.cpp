// libFuzzer target for the SentencePiece ModelProto wire-format reader: any
// bytes must give an error or a model whose pieces are non-empty with a known
// type, and rewriting the normalizer of parseable bytes must give bytes that
// parse to the same pieces with the new normalizer. A violation traps.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "tokenizer/sentencepiece_proto.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }  // NaN scores too

bool same_normalizer(const tern::NormalizerSettings& a, const tern::NormalizerSettings& b) {
  return a.name == b.name && a.add_dummy_prefix == b.add_dummy_prefix &&
         a.remove_extra_whitespaces == b.remove_extra_whitespaces && a.escape_whitespaces == b.escape_whitespaces;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  auto model = tern::parse_sentencepiece_model(bytes, "fuzz.model");
  if (!model.is_ok()) {
    check(!model.status().message().empty());
    // The rewriter reads only the top level, so it may accept what the full
    // parse refuses; it must still not crash.
    auto rewritten = tern::rewrite_sentencepiece_normalizer(bytes, "fuzz.model", tern::hf_compatible_normalizer());
    (void)rewritten;
    return 0;
  }
  check(!model->pieces.empty());
  for (const tern::SentencePieceEntry& p : model->pieces) {
    check(!p.piece.empty());
    const auto type = static_cast<uint8_t>(p.type);
    check(type >= 1 && type <= 6);
  }

  const tern::NormalizerSettings normalizer = tern::hf_compatible_normalizer();
  auto rewritten = tern::rewrite_sentencepiece_normalizer(bytes, "fuzz.model", normalizer);
  check(rewritten.is_ok());
  auto again = tern::parse_sentencepiece_model(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(rewritten->data()), rewritten->size()), "again");
  check(again.is_ok());
  check(!again->has_denormalizer);
  check(same_normalizer(again->normalizer, normalizer));
  check(again->normalizer.precompiled_charsmap_size == 0);
  check(again->pieces.size() == model->pieces.size());
  for (size_t i = 0; i < model->pieces.size(); ++i) {
    const auto& a = model->pieces[i];
    const auto& b = again->pieces[i];
    check(a.piece == b.piece && a.type == b.type && same_bits(a.score, b.score));
  }
  return 0;
}
