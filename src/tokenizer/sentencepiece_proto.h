// A minimal reader/writer for SentencePiece's serialized ModelProto
// (tokenizer.model), written by hand because Debian ships no model .pb.h. It
// reads the piece list (decode needs piece types) and rewrites the normalizer
// so SentencePiece encodes exactly what HF's converted tokenizer does. The
// bytes are untrusted: every read is bounds-checked and errors name the offset.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tern {

// ModelProto.SentencePiece.Type, numbered as in sentencepiece_model.proto.
enum class PieceType : uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct SentencePieceEntry {
  std::string piece;
  float score = 0.0f;
  PieceType type = PieceType::kNormal;
};

// ModelProto.NormalizerSpec fields tern cares about (defaults as in the .proto).
struct NormalizerSettings {
  std::string name;
  size_t precompiled_charsmap_size = 0;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

struct SentencePieceModelProto {
  std::vector<SentencePieceEntry> pieces;  // index = token id
  NormalizerSettings normalizer;           // as stored in the file
  bool has_denormalizer = false;
};

// Parses the top level of a ModelProto and every SentencePiece in field 1.
// `name` (usually the file path) prefixes error messages.
Result<SentencePieceModelProto> parse_sentencepiece_model(std::span<const uint8_t> bytes,
                                                          std::string_view name);

// Returns the same ModelProto with NormalizerSpec replaced by {name:
// "identity", add_dummy_prefix: false, remove_extra_whitespaces: false,
// escape_whitespaces: true} and the denormalizer dropped: SentencePiece then
// only turns ' ' into U+2581, like HF's Replace(" ", "▁") normalizer.
// `normalizer` lets tests write other settings.
Result<std::string> rewrite_sentencepiece_normalizer(std::span<const uint8_t> bytes, std::string_view name,
                                                     const NormalizerSettings& normalizer);
NormalizerSettings hf_compatible_normalizer();

// ModelProto.TrainerSpec.ModelType, numbered as in sentencepiece_model.proto.
enum class SentencePieceModelType : uint8_t { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

// A whole ModelProto built from a piece list (a GGUF's vocabulary): the
// pieces in id order, a TrainerSpec holding only what encoding reads
// (model_type, vocab_size, byte_fallback) and `normalizer`. What
// libsentencepiece then rejects (no or two unknown pieces, duplicate pieces)
// is its error to report; an empty piece is refused here (kInvalidArgument).
Result<std::string> serialize_sentencepiece_model(std::span<const SentencePieceEntry> pieces,
                                                  SentencePieceModelType type, bool byte_fallback,
                                                  const NormalizerSettings& normalizer);

}  // namespace tern
