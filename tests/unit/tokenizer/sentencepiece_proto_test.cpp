// Tests of the hand-written ModelProto reader/writer: it reads the real
// fixture, rewrites only the normalizer, and turns truncated or corrupted
// bytes into errors with offsets instead of crashes.
#include "tokenizer/sentencepiece_proto.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "support/tokenizer_fixture.h"

namespace tern {
namespace {

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Builders for hand-made messages.
std::string varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
  return out;
}
std::string len_field(uint32_t number, const std::string& payload) {
  return varint(number << 3 | 2) + varint(payload.size()) + payload;
}
std::string piece_msg(const std::string& piece, float score, int type) {
  std::string score_bytes(4, '\0');
  std::memcpy(score_bytes.data(), &score, 4);
  return len_field(1, piece) + varint(2 << 3 | 5) + score_bytes + varint(3 << 3 | 0) + varint(type);
}

class SentencePieceProtoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::read_file(testing::fixture_dir() + "/tokenizer.model");
    ASSERT_GT(model_.size(), 1000u) << "fixture missing: run tools/make_tokenizer_fixture.py";
  }
  std::string model_;
};

TEST_F(SentencePieceProtoTest, ReadsFixturePiecesAndTypes) {
  auto parsed = parse_sentencepiece_model(as_bytes(model_), "tokenizer.model");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  const auto& pieces = parsed->pieces;
  ASSERT_EQ(pieces.size(), 1200u);
  EXPECT_EQ(pieces[0].piece, "<unk>");
  EXPECT_EQ(pieces[0].type, PieceType::kUnknown);
  EXPECT_EQ(pieces[1].piece, "<s>");
  EXPECT_EQ(pieces[1].type, PieceType::kControl);
  EXPECT_EQ(pieces[2].piece, "</s>");
  EXPECT_EQ(pieces[3].piece, "<|begin_of_sentence|>");
  EXPECT_EQ(pieces[3].type, PieceType::kUserDefined);
  int bytes = 0, normal = 0;
  for (const auto& p : pieces) {
    bytes += p.type == PieceType::kByte;
    normal += p.type == PieceType::kNormal;
  }
  EXPECT_EQ(bytes, 256);
  EXPECT_GT(normal, 500);
  EXPECT_EQ(parsed->normalizer.name, "identity");
  EXPECT_FALSE(parsed->normalizer.add_dummy_prefix);
  EXPECT_FALSE(parsed->normalizer.remove_extra_whitespaces);
}

TEST_F(SentencePieceProtoTest, RewriteReplacesOnlyTheNormalizer) {
  NormalizerSettings odd;
  odd.name = "nmt_nfkc";
  odd.add_dummy_prefix = true;
  odd.remove_extra_whitespaces = true;
  odd.escape_whitespaces = false;
  auto once = rewrite_sentencepiece_normalizer(as_bytes(model_), "m", odd);
  ASSERT_TRUE(once.is_ok());
  auto parsed_once = parse_sentencepiece_model(as_bytes(*once), "m");
  ASSERT_TRUE(parsed_once.is_ok());
  EXPECT_EQ(parsed_once->normalizer.name, "nmt_nfkc");
  EXPECT_TRUE(parsed_once->normalizer.add_dummy_prefix);
  EXPECT_TRUE(parsed_once->normalizer.remove_extra_whitespaces);
  EXPECT_FALSE(parsed_once->normalizer.escape_whitespaces);

  auto twice = rewrite_sentencepiece_normalizer(as_bytes(*once), "m", hf_compatible_normalizer());
  ASSERT_TRUE(twice.is_ok());
  auto parsed = parse_sentencepiece_model(as_bytes(*twice), "m");
  ASSERT_TRUE(parsed.is_ok());
  EXPECT_EQ(parsed->normalizer.name, "identity");
  EXPECT_FALSE(parsed->normalizer.add_dummy_prefix);
  EXPECT_FALSE(parsed->normalizer.remove_extra_whitespaces);
  EXPECT_TRUE(parsed->normalizer.escape_whitespaces);
  EXPECT_EQ(parsed->normalizer.precompiled_charsmap_size, 0u);
  EXPECT_FALSE(parsed->has_denormalizer);

  auto original = parse_sentencepiece_model(as_bytes(model_), "m");
  ASSERT_EQ(parsed->pieces.size(), original->pieces.size());
  for (size_t i = 0; i < parsed->pieces.size(); ++i) {
    EXPECT_EQ(parsed->pieces[i].piece, original->pieces[i].piece);
    EXPECT_EQ(parsed->pieces[i].score, original->pieces[i].score);
    EXPECT_EQ(parsed->pieces[i].type, original->pieces[i].type);
  }
}

TEST_F(SentencePieceProtoTest, DropsDenormalizer) {
  std::string with_denorm = model_ + len_field(5, len_field(1, "identity"));
  auto parsed = parse_sentencepiece_model(as_bytes(with_denorm), "m");
  ASSERT_TRUE(parsed.is_ok());
  EXPECT_TRUE(parsed->has_denormalizer);
  auto rewritten = rewrite_sentencepiece_normalizer(as_bytes(with_denorm), "m", hf_compatible_normalizer());
  ASSERT_TRUE(rewritten.is_ok());
  EXPECT_FALSE(parse_sentencepiece_model(as_bytes(*rewritten), "m")->has_denormalizer);
}

TEST_F(SentencePieceProtoTest, TruncationNeverCrashesAndNamesAnOffset) {
  // Cuts inside a field must fail with an offset; a cut that lands exactly on
  // a field boundary is a valid (shorter) message.
  int failures = 0;
  for (size_t len = 0; len < model_.size(); len += (len < 300 ? 1 : 97)) {
    std::string cut = model_.substr(0, len);
    auto parsed = parse_sentencepiece_model(as_bytes(cut), "tokenizer.model");
    auto rewritten =
        rewrite_sentencepiece_normalizer(as_bytes(cut), "tokenizer.model", hf_compatible_normalizer());
    EXPECT_EQ(parsed.is_ok() || len == 0, rewritten.is_ok()) << len;
    if (!parsed.is_ok()) {
      ++failures;
      EXPECT_EQ(parsed.status().code(), ErrorCode::kParse);
      EXPECT_NE(parsed.status().message().find("tokenizer.model"), std::string::npos);
    }
  }
  EXPECT_GT(failures, 100);
}

TEST_F(SentencePieceProtoTest, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::string bad = model_;
    int flips = 1 + trial % 8;
    for (int k = 0; k < flips; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    auto parsed = parse_sentencepiece_model(as_bytes(bad), "m");
    auto rewritten = rewrite_sentencepiece_normalizer(as_bytes(bad), "m", hf_compatible_normalizer());
    if (!parsed.is_ok()) {
      EXPECT_EQ(parsed.status().message().rfind("m: ", 0), 0u);
    }
    (void)rewritten;
  }
}

struct BadCase {
  const char* label;
  std::string bytes;
  const char* expected;  // substring of the error message
};

TEST(SentencePieceProtoErrors, ReportWhatAndWhere) {
  const std::string good_piece = len_field(1, piece_msg("a", -1.0f, 1));
  const std::vector<BadCase> cases = {
      {"empty", "", "no SentencePiece pieces"},
      {"truncated tag", "\x8a", "offset 0: truncated varint"},
      {"truncated length", "\x0a", "offset 1: truncated varint"},
      {"length past end",
       std::string("\x0a\x05"
                   "ab",
                   4),
       "offset 2: field of 5 bytes runs past the end (2 left)"},
      {"huge length", "\x0a" + varint(uint64_t{1} << 62), "runs past the end"},
      {"overlong varint", "\x08" + std::string(10, '\xff') + "\x01", "varint"},
      {"group wire type", "\x0b", "unsupported wire type 3"},
      {"wire type 7", "\x0f", "unsupported wire type 7"},
      {"field zero", std::string("\x00\x00", 2), "invalid field number"},
      {"pieces not length-delimited", "\x08\x01", "field 1 has wire type 0, expected 2"},
      {"piece type out of range", len_field(1, piece_msg("a", 0.0f, 9)), "piece type 9 is not 1..6"},
      {"empty piece", len_field(1, piece_msg("", 0.0f, 1)), "piece 0 is empty"},
      {"nested truncation",
       good_piece + len_field(1, std::string("\x0a\x09"
                                             "abc",
                                             5)),
       "runs past the end"},
  };
  for (const BadCase& c : cases) {
    auto parsed = parse_sentencepiece_model(as_bytes(c.bytes), "tokenizer.model");
    ASSERT_FALSE(parsed.is_ok()) << c.label;
    EXPECT_NE(parsed.status().message().find(c.expected), std::string::npos)
        << c.label << ": " << parsed.status().message();
    EXPECT_EQ(parsed.status().message().rfind("tokenizer.model: ", 0), 0u) << c.label;
  }
}

TEST(SentencePieceProtoErrors, NestedOffsetsAreAbsolute) {
  // The second piece's inner string claims 9 bytes but only 3 follow; the
  // error must point into the file, not into the sub-message.
  const std::string first = len_field(1, piece_msg("a", -1.0f, 1));
  const std::string inner = std::string("\x0a\x09", 2) + "abc";
  const std::string bytes = first + len_field(1, inner);
  auto parsed = parse_sentencepiece_model(as_bytes(bytes), "m");
  ASSERT_FALSE(parsed.is_ok());
  // first + tag(1) + len(1) + inner tag(1) + inner len(1) = where the 9 bytes should start
  std::string where = "offset " + std::to_string(first.size() + 4) + ":";
  EXPECT_NE(parsed.status().message().find(where), std::string::npos) << parsed.status().message();
}

TEST(SentencePieceProtoErrors, HandMadeModelParses) {
  std::string bytes =
      len_field(1, piece_msg("<unk>", 0.0f, 2)) + len_field(1, piece_msg("\xe2\x96\x81x", -2.5f, 1)) +
      len_field(1, piece_msg("<0x41>", 0.0f, 6)) + varint(99 << 3 | 0) + varint(5);  // unknown field
  auto parsed = parse_sentencepiece_model(as_bytes(bytes), "m");
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  ASSERT_EQ(parsed->pieces.size(), 3u);
  EXPECT_EQ(parsed->pieces[1].piece, "\xe2\x96\x81x");
  EXPECT_FLOAT_EQ(parsed->pieces[1].score, -2.5f);
  EXPECT_EQ(parsed->pieces[2].type, PieceType::kByte);
  // No NormalizerSpec in the file: the .proto defaults apply.
  EXPECT_TRUE(parsed->normalizer.add_dummy_prefix);
}

}  // namespace
}  // namespace tern
