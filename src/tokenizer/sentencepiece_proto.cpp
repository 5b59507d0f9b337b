// Protobuf wire-format reading and writing for SentencePiece's ModelProto,
// limited to what tern needs: the piece list and the normalizer. Every read
// checks bounds before it indexes; errors say where in the file it failed.
#include "tokenizer/sentencepiece_proto.h"

#include <cstring>
#include <utility>

namespace tern {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// ModelProto field numbers (sentencepiece_model.proto).
constexpr uint32_t kModelPieces = 1;
constexpr uint32_t kModelTrainerSpec = 2;
constexpr uint32_t kModelNormalizerSpec = 3;
constexpr uint32_t kModelDenormalizerSpec = 5;

// One field as it sits in the buffer: its raw bytes (tag included) for
// copying, and its payload for parsing.
struct WireField {
  uint32_t number = 0;
  uint32_t wire = 0;
  size_t begin = 0;  // offset of the tag
  size_t end = 0;    // one past the last byte
  uint64_t varint = 0;
  std::span<const uint8_t> payload;  // length-delimited contents
  size_t payload_offset = 0;
};

// Sequential reader over one message. Offsets in errors are absolute (from
// the start of the file) so nested messages report where the bad byte is.
class WireReader {
 public:
  WireReader(std::span<const uint8_t> bytes, size_t base, std::string_view name)
      : bytes_(bytes), base_(base), name_(name) {}

  bool done() const { return pos_ >= bytes_.size(); }

  Status next(WireField& f) {
    f = WireField{};
    f.begin = pos_;
    uint64_t tag = 0;
    TERN_RETURN_IF_ERROR(read_varint(tag));
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire = static_cast<uint32_t>(tag & 7);
    if (tag >> 3 == 0 || tag >> 3 > 0x1fffffff) return error(f.begin, "invalid field number");
    switch (f.wire) {
      case kVarint:
        TERN_RETURN_IF_ERROR(read_varint(f.varint));
        break;
      case kFixed64:
        TERN_RETURN_IF_ERROR(take(8, f.payload));
        break;
      case kFixed32:
        TERN_RETURN_IF_ERROR(take(4, f.payload));
        break;
      case kLengthDelimited: {
        uint64_t len = 0;
        TERN_RETURN_IF_ERROR(read_varint(len));
        f.payload_offset = base_ + pos_;
        TERN_RETURN_IF_ERROR(take(len, f.payload));
        break;
      }
      default:  // groups (3, 4) are not used by ModelProto; 6 and 7 do not exist
        return error(f.begin, "field " + std::to_string(f.number) + " has unsupported wire type " +
                                  std::to_string(f.wire));
    }
    f.end = pos_;
    return Status::ok();
  }

  Status error(size_t local_offset, const std::string& what) const {
    return parse_error(std::string(name_) + ": offset " + std::to_string(base_ + local_offset) + ": " + what);
  }

 private:
  Status read_varint(uint64_t& out) {
    out = 0;
    const size_t start = pos_;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) return error(start, "truncated varint");
      uint8_t b = bytes_[pos_++];
      if (shift == 63 && b > 1) return error(start, "varint overflows 64 bits");
      out |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return Status::ok();
    }
    return error(start, "varint longer than 10 bytes");
  }

  Status take(uint64_t len, std::span<const uint8_t>& out) {
    if (len > bytes_.size() - pos_) {
      return error(pos_, "field of " + std::to_string(len) + " bytes runs past the end (" +
                             std::to_string(bytes_.size() - pos_) + " left)");
    }
    out = bytes_.subspan(pos_, static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return Status::ok();
  }

  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
  size_t base_;
  std::string_view name_;
};

std::string as_string(std::span<const uint8_t> s) {
  return std::string(reinterpret_cast<const char*>(s.data()), s.size());
}

// Checks that a known field arrived with the wire type the schema gives it.
Status expect_wire(const WireReader& r, const WireField& f, uint32_t wire) {
  if (f.wire == wire) return Status::ok();
  return r.error(f.begin, "field " + std::to_string(f.number) + " has wire type " + std::to_string(f.wire) +
                              ", expected " + std::to_string(wire));
}

Status parse_piece(const WireField& outer, std::string_view name, SentencePieceEntry& out) {
  WireReader r(outer.payload, outer.payload_offset, name);
  while (!r.done()) {
    WireField f;
    TERN_RETURN_IF_ERROR(r.next(f));
    if (f.number == 1) {
      TERN_RETURN_IF_ERROR(expect_wire(r, f, kLengthDelimited));
      out.piece = as_string(f.payload);
    } else if (f.number == 2) {
      TERN_RETURN_IF_ERROR(expect_wire(r, f, kFixed32));
      uint32_t bits = static_cast<uint32_t>(f.payload[0]) | static_cast<uint32_t>(f.payload[1]) << 8 |
                      static_cast<uint32_t>(f.payload[2]) << 16 | static_cast<uint32_t>(f.payload[3]) << 24;
      std::memcpy(&out.score, &bits, sizeof(bits));
    } else if (f.number == 3) {
      TERN_RETURN_IF_ERROR(expect_wire(r, f, kVarint));
      if (f.varint < 1 || f.varint > 6) {
        return r.error(f.begin, "piece type " + std::to_string(f.varint) + " is not 1..6");
      }
      out.type = static_cast<PieceType>(f.varint);
    }
  }
  return Status::ok();
}

Status parse_normalizer(const WireField& outer, std::string_view name, NormalizerSettings& out) {
  WireReader r(outer.payload, outer.payload_offset, name);
  while (!r.done()) {
    WireField f;
    TERN_RETURN_IF_ERROR(r.next(f));
    switch (f.number) {
      case 1:
        TERN_RETURN_IF_ERROR(expect_wire(r, f, kLengthDelimited));
        out.name = as_string(f.payload);
        break;
      case 2:
        TERN_RETURN_IF_ERROR(expect_wire(r, f, kLengthDelimited));
        out.precompiled_charsmap_size = f.payload.size();
        break;
      case 3:
      case 4:
      case 5: {
        TERN_RETURN_IF_ERROR(expect_wire(r, f, kVarint));
        bool v = f.varint != 0;
        (f.number == 3   ? out.add_dummy_prefix
         : f.number == 4 ? out.remove_extra_whitespaces
                         : out.escape_whitespaces) = v;
        break;
      }
      default:
        break;  // normalization_rule_tsv and future fields: irrelevant here
    }
  }
  return Status::ok();
}

void write_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

void write_tag(std::string& out, uint32_t number, uint32_t wire) {
  write_varint(out, (static_cast<uint64_t>(number) << 3) | wire);
}

std::string serialize_normalizer(const NormalizerSettings& n) {
  // Every flag is written, even when false: the proto2 defaults of
  // add_dummy_prefix and remove_extra_whitespaces are true.
  std::string msg;
  write_tag(msg, 1, kLengthDelimited);
  write_varint(msg, n.name.size());
  msg += n.name;
  write_tag(msg, 3, kVarint);
  write_varint(msg, n.add_dummy_prefix ? 1 : 0);
  write_tag(msg, 4, kVarint);
  write_varint(msg, n.remove_extra_whitespaces ? 1 : 0);
  write_tag(msg, 5, kVarint);
  write_varint(msg, n.escape_whitespaces ? 1 : 0);
  return msg;
}

}  // namespace

Result<SentencePieceModelProto> parse_sentencepiece_model(std::span<const uint8_t> bytes,
                                                          std::string_view name) {
  SentencePieceModelProto model;
  bool has_normalizer = false;
  WireReader r(bytes, 0, name);
  while (!r.done()) {
    WireField f;
    TERN_RETURN_IF_ERROR(r.next(f));
    if (f.number == kModelPieces) {
      TERN_RETURN_IF_ERROR(expect_wire(r, f, kLengthDelimited));
      SentencePieceEntry e;
      TERN_RETURN_IF_ERROR(parse_piece(f, name, e));
      model.pieces.push_back(std::move(e));
    } else if (f.number == kModelNormalizerSpec) {
      TERN_RETURN_IF_ERROR(expect_wire(r, f, kLengthDelimited));
      TERN_RETURN_IF_ERROR(parse_normalizer(f, name, model.normalizer));
      has_normalizer = true;
    } else if (f.number == kModelDenormalizerSpec) {
      TERN_RETURN_IF_ERROR(expect_wire(r, f, kLengthDelimited));
      model.has_denormalizer = true;
    }
  }
  if (model.pieces.empty()) {
    return parse_error(std::string(name) + ": no SentencePiece pieces (not a tokenizer.model?)");
  }
  if (!has_normalizer) model.normalizer = NormalizerSettings{};
  for (size_t i = 0; i < model.pieces.size(); ++i) {
    if (model.pieces[i].piece.empty()) {
      return parse_error(std::string(name) + ": piece " + std::to_string(i) + " is empty");
    }
  }
  return model;
}

NormalizerSettings hf_compatible_normalizer() {
  NormalizerSettings n;
  n.name = "identity";
  n.add_dummy_prefix = false;
  n.remove_extra_whitespaces = false;
  n.escape_whitespaces = true;
  return n;
}

Result<std::string> serialize_sentencepiece_model(std::span<const SentencePieceEntry> pieces,
                                                  SentencePieceModelType type, bool byte_fallback,
                                                  const NormalizerSettings& normalizer) {
  std::string out;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const SentencePieceEntry& p = pieces[i];
    if (p.piece.empty()) return invalid_argument("SentencePiece model: piece " + std::to_string(i) + " is empty");
    std::string msg;
    write_tag(msg, 1, kLengthDelimited);
    write_varint(msg, p.piece.size());
    msg += p.piece;
    write_tag(msg, 2, kFixed32);
    uint32_t bits = 0;
    std::memcpy(&bits, &p.score, sizeof(bits));
    for (int b = 0; b < 4; ++b) msg += static_cast<char>((bits >> (8 * b)) & 0xff);
    write_tag(msg, 3, kVarint);
    write_varint(msg, static_cast<uint64_t>(p.type));
    write_tag(out, kModelPieces, kLengthDelimited);
    write_varint(out, msg.size());
    out += msg;
  }
  // TrainerSpec fields 3 (model_type), 4 (vocab_size), 35 (byte_fallback).
  std::string trainer;
  write_tag(trainer, 3, kVarint);
  write_varint(trainer, static_cast<uint64_t>(type));
  write_tag(trainer, 4, kVarint);
  write_varint(trainer, pieces.size());
  write_tag(trainer, 35, kVarint);
  write_varint(trainer, byte_fallback ? 1 : 0);
  write_tag(out, kModelTrainerSpec, kLengthDelimited);
  write_varint(out, trainer.size());
  out += trainer;
  std::string spec = serialize_normalizer(normalizer);
  write_tag(out, kModelNormalizerSpec, kLengthDelimited);
  write_varint(out, spec.size());
  out += spec;
  return out;
}

Result<std::string> rewrite_sentencepiece_normalizer(std::span<const uint8_t> bytes, std::string_view name,
                                                     const NormalizerSettings& normalizer) {
  std::string out;
  out.reserve(bytes.size() + 64);
  WireReader r(bytes, 0, name);
  while (!r.done()) {
    WireField f;
    TERN_RETURN_IF_ERROR(r.next(f));
    if (f.number == kModelNormalizerSpec || f.number == kModelDenormalizerSpec) continue;
    out.append(reinterpret_cast<const char*>(bytes.data() + f.begin), f.end - f.begin);
  }
  std::string spec = serialize_normalizer(normalizer);
  write_tag(out, kModelNormalizerSpec, kLengthDelimited);
  write_varint(out, spec.size());
  out += spec;
  return out;
}

}  // namespace tern
