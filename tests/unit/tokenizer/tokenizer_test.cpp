// Tokenizer behaviour users rely on, on the committed fixture model: exact
// round trips (whitespace kept as HF keeps it), special tokens as single ids,
// byte fallback, config files read rather than hard-coded ids, and clean
// errors for broken model folders.
#include "tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "base/utf8.h"
#include "tokenizer/sentencepiece_proto.h"
#include "support/tokenizer_fixture.h"

namespace tern {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kSpace = "\xe2\x96\x81";  // U+2581

class TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = &testing::fixture_tokenizer(); }
  static const Tokenizer& tok() { return *tok_; }
  static int32_t id(const std::string& piece) {
    auto v = tok_->piece_to_id(piece);
    EXPECT_TRUE(v.has_value()) << piece;
    return v.value_or(-1);
  }
  static std::vector<std::string> pieces(const std::vector<int32_t>& ids) {
    std::vector<std::string> out;
    for (int32_t i : ids) out.push_back(tok_->id_to_piece(i));
    return out;
  }
  static std::string joined_pieces(const std::string& text) {
    std::string out;
    for (const std::string& p : pieces(tok_->encode(text))) out += p;
    return out;
  }
  static const Tokenizer* tok_;
};
const Tokenizer* TokenizerTest::tok_ = nullptr;

TEST_F(TokenizerTest, IdsComeFromTheFiles) {
  EXPECT_EQ(tok().vocab_size(), 1200);
  EXPECT_EQ(tok().bos_id(), 1);
  EXPECT_EQ(tok().eos_id(), 2);
  EXPECT_EQ(tok().pad_id(), 0);  // pad_token is "<unk>"
  EXPECT_EQ(tok().cls_id(), std::optional<int32_t>(3));
  EXPECT_EQ(tok().sep_id(), std::optional<int32_t>(4));
  EXPECT_EQ(tok().cls_token(), "<|begin_of_sentence|>");
  EXPECT_EQ(tok().sep_token(), "<|end_of_sentence|>");
  EXPECT_FALSE(tok().add_bos_token());
  EXPECT_THAT(tok().default_stop_ids(), ElementsAre(2, 4));
  EXPECT_THAT(tok().chat_template(), HasSubstr("Assistant: "));
  EXPECT_TRUE(tok().is_special(0));
  EXPECT_TRUE(tok().is_special(2));
  EXPECT_TRUE(tok().is_special(id("<mask:1>")));
  EXPECT_FALSE(tok().is_special(id("<0x41>")));
  EXPECT_FALSE(tok().is_special(-1));
  EXPECT_FALSE(tok().is_special(1200));
  EXPECT_EQ(tok().pieces().size(), 1200u);
}

TEST_F(TokenizerTest, RoundTripsExactly) {
  const std::vector<std::string> texts = {
      "你好，世界！",
      "人工智能正在改变我们的生活和工作方式。",
      "The quick brown fox jumps over the lazy dog.",
      "mixed 中文 and English 混合 text",
      "emoji 😀🎉 and 你好👍",
      "a  b   c    d",
      "        four leading",
      " one leading",
      "trailing   ",
      "   ",
      " ",
      "line1\nline2\n\n\nline5\n",
      "\ttab\tseparated\t\tvalues\r\n",
      "def add(a, b):\n    return a + b\n",
      "x<|end_of_sentence|>y",
      " <|end_of_sentence|> ",
      "<|begin_of_sentence|>User: hi\nAssistant: ",
      "<|begin_of_sentence|><|end_of_sentence|><mask:1>",
      "rare 𝄞 龘 ꙮ characters",
      "ＦＵＬＬ　ＷＩＤＴＨ　１２３ café naïve",
      "1234567890 3.14159",
      "a\u00a0b",
      "<|end_of_sent",
      "<<|end_of_sentence|>>",
      "",
  };
  for (const std::string& t : texts) {
    std::vector<int32_t> ids = tok().encode(t);
    EXPECT_EQ(tok().decode(ids, /*skip_special_tokens=*/false), t) << t;
    for (int32_t i : ids) EXPECT_GE(i, 0) << t;
  }
  EXPECT_TRUE(tok().encode("").empty());
}

TEST_F(TokenizerTest, KeepsEveryWhitespaceLikeHf) {
  // HF (legacy, add_prefix_space=False) only replaces ' ' by U+2581: no dummy
  // prefix, no collapsing of runs, no trimming, other whitespace untouched.
  EXPECT_EQ(joined_pieces("hello"), "hello");
  EXPECT_EQ(joined_pieces(" hello"), kSpace + "hello");
  EXPECT_EQ(joined_pieces("a  b   c"), "a" + kSpace + kSpace + "b" + kSpace + kSpace + kSpace + "c");
  EXPECT_EQ(joined_pieces("   "), kSpace + kSpace + kSpace);
  EXPECT_EQ(joined_pieces("x "), "x" + kSpace);
  EXPECT_NE(tok().encode("hello"), tok().encode(" hello"));
  EXPECT_THAT(pieces(tok().encode("\n")), ElementsAre("<0x0A>"));
  EXPECT_THAT(pieces(tok().encode("a\n\nb")), ElementsAre("a", "<0x0A>", "<0x0A>", "b"));
  // Full-width characters are not NFKC-folded as SentencePiece's nmt_nfkc would.
  EXPECT_EQ(tok().decode(tok().encode("ＡＢＣ")), "ＡＢＣ");
}

TEST_F(TokenizerTest, SpecialTokensInTextAreSingleIds) {
  const int32_t cls = *tok().cls_id();
  const int32_t sep = *tok().sep_id();
  std::vector<int32_t> ids = tok().encode("<|begin_of_sentence|>User: hi\nAssistant: ");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], cls);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), cls), 1);

  // Segments on each side are encoded on their own: nothing leaks across.
  auto concat = [](std::vector<int32_t> a, std::vector<int32_t> b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  EXPECT_EQ(tok().encode("x<|end_of_sentence|>y"),
            concat(concat(tok().encode("x"), {sep}), tok().encode("y")));
  EXPECT_EQ(tok().encode(" <|end_of_sentence|> "),
            concat(concat(tok().encode(" "), {sep}), tok().encode(" ")));
  EXPECT_EQ(tok().encode("a <mask:1> b"),
            concat(concat(tok().encode("a "), {id("<mask:1>")}), tok().encode(" b")));
  EXPECT_THAT(tok().encode("<|end_of_sentence|><|end_of_sentence|>"), ElementsAre(sep, sep));
  // The control tokens are named special tokens, so HF splits them out too.
  EXPECT_THAT(tok().encode("</s>"), ElementsAre(2));
  // A prefix of a special token is plain text.
  std::vector<int32_t> partial = tok().encode("<|end_of_sent");
  EXPECT_EQ(std::count(partial.begin(), partial.end(), sep), 0);
  EXPECT_GT(partial.size(), 1u);
}

TEST_F(TokenizerTest, NoBosUnlessConfigured) {
  std::vector<int32_t> ids = tok().encode("hello", /*add_special_tokens=*/true);
  ASSERT_FALSE(ids.empty());
  EXPECT_NE(ids[0], tok().bos_id());
  EXPECT_EQ(ids, tok().encode("hello", false));
}

TEST_F(TokenizerTest, ByteFallbackForRareCharacters) {
  // U+1D11E (𝄞) is not in the fixture's vocabulary: four byte pieces.
  EXPECT_THAT(pieces(tok().encode("𝄞")), ElementsAre("<0xF0>", "<0x9D>", "<0x84>", "<0x9E>"));
  EXPECT_EQ(tok().decode(tok().encode("𝄞")), "𝄞");
  // A CJK character outside the corpus: three byte pieces.
  EXPECT_THAT(pieces(tok().encode("龘")), ElementsAre("<0xE9>", "<0xBE>", "<0x98>"));
  EXPECT_EQ(tok().token_bytes(id("<0xE9>")), "\xe9");
  EXPECT_EQ(tok().decode(tok().encode("a龘b")), "a龘b");
}

TEST_F(TokenizerTest, DecodeSkipsSpecialAndUnknownIds) {
  const int32_t sep = *tok().sep_id();
  std::vector<int32_t> ids = tok().encode("你好");
  std::vector<int32_t> with = ids;
  with.insert(with.begin(), *tok().cls_id());
  with.push_back(sep);
  with.push_back(tok().eos_id());
  EXPECT_EQ(tok().decode(with, /*skip_special_tokens=*/true), "你好");
  EXPECT_EQ(tok().decode(with, false), "<|begin_of_sentence|>你好<|end_of_sentence|></s>");
  std::vector<int32_t> junk = {-7, 1200, 1 << 30, ids[0]};
  EXPECT_EQ(tok().decode(junk, false), tok().token_bytes(ids[0]));
  EXPECT_EQ(tok().token_bytes(-1), "");
  EXPECT_EQ(tok().id_to_piece(5000), "");
  EXPECT_FALSE(tok().piece_to_id("no such piece").has_value());
}

TEST_F(TokenizerTest, TokenBytesTurnsSpaceSymbolIntoSpace) {
  std::vector<int32_t> ids = tok().encode(" the");
  ASSERT_EQ(ids.size(), 1u) << "fixture should have the piece ▁the";
  EXPECT_EQ(tok().id_to_piece(ids[0]), kSpace + "the");
  EXPECT_EQ(tok().token_bytes(ids[0]), " the");
}

TEST_F(TokenizerTest, InvalidUtf8InputIsReplacedNotFatal) {
  std::vector<int32_t> ids = tok().encode(
      "a\xff"
      "b\xe4");
  EXPECT_EQ(tok().decode(ids),
            "a\xef\xbf\xbd"
            "b\xef\xbf\xbd");
}

// The model file's own normalizer must not matter: tern replaces it.
TEST_F(TokenizerTest, IgnoresTheNormalizerStoredInTheModel) {
  testing::TempDir dir;
  std::string model = testing::read_file(testing::fixture_dir() + "/tokenizer.model");
  NormalizerSettings spm_default;
  spm_default.name = "nmt_nfkc";
  spm_default.add_dummy_prefix = true;
  spm_default.remove_extra_whitespaces = true;
  auto rewritten = rewrite_sentencepiece_normalizer(
      {reinterpret_cast<const uint8_t*>(model.data()), model.size()}, "m", spm_default);
  ASSERT_TRUE(rewritten.is_ok());
  dir.write("tokenizer.model", *rewritten);
  dir.write("tokenizer_config.json", testing::read_file(testing::fixture_dir() + "/tokenizer_config.json"));
  auto other = Tokenizer::load(dir.path());
  ASSERT_TRUE(other.is_ok()) << other.status().to_string();
  for (const char* t : {"  two  spaces  ", " lead", "a\n b", "x <|end_of_sentence|> y", "你好 world"}) {
    EXPECT_EQ(other->encode(t), tok().encode(t)) << t;
  }
}

// ---- config variants: a copy of tokenizer.model with different JSON files ----

class TokenizerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.write("tokenizer.model", testing::read_file(testing::fixture_dir() + "/tokenizer.model"));
  }
  Result<Tokenizer> load() { return Tokenizer::load(dir_.path()); }
  testing::TempDir dir_;
};

TEST_F(TokenizerConfigTest, ModelAloneUsesSentencePieceIds) {
  auto tok = load();
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_FALSE(tok->cls_id().has_value());
  EXPECT_TRUE(tok->chat_template().empty());
  // User-defined pieces are still matched whole, but are not special.
  EXPECT_THAT(tok->encode("a<|begin_of_sentence|>"), ::testing::Contains(3));
  EXPECT_FALSE(tok->is_special(3));
  EXPECT_EQ(tok->decode(tok->encode("<|begin_of_sentence|>x"), true), "<|begin_of_sentence|>x");
  // <|end_of_sentence|> still stops generation.
  EXPECT_THAT(tok->default_stop_ids(), ElementsAre(2, 4));
}

TEST_F(TokenizerConfigTest, AddedTokensPastTheVocabulary) {
  dir_.write("added_tokens.json", R"({"<|tool|>": 1200, "<mask:4>": 1201})");
  dir_.write("special_tokens_map.json", R"({"eos_token": {"content": "</s>", "lstrip": false},
      "cls_token": "<|begin_of_sentence|>", "additional_special_tokens": ["<mask:4>"]})");
  dir_.write("tokenizer.json", R"({"version": "1.0", "added_tokens": [
      {"id": 1202, "content": "<sep>", "special": true, "lstrip": true, "rstrip": true, "normalized": false}],
      "model": {"type": "BPE"}})");
  auto tok = load();
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ(tok->vocab_size(), 1203);
  EXPECT_EQ(tok->cls_id(), std::optional<int32_t>(3));
  EXPECT_FALSE(tok->is_special(1200));  // added_tokens.json alone does not make it special
  EXPECT_TRUE(tok->is_special(1201));   // named in additional_special_tokens
  EXPECT_TRUE(tok->is_special(1202));
  EXPECT_EQ(tok->token_bytes(1200), "<|tool|>");
  std::vector<int32_t> ids = tok->encode("a<|tool|>b<mask:4>");
  EXPECT_THAT(ids, ::testing::Contains(1200));
  EXPECT_EQ(ids.back(), 1201);
  EXPECT_EQ(tok->decode(ids, true), "a<|tool|>b");
  // lstrip/rstrip swallow the whitespace around the token, as HF does.
  std::vector<int32_t> stripped = tok->encode("a   <sep>  b");
  std::vector<int32_t> expected = tok->encode("a");
  expected.push_back(1202);
  for (int32_t i : tok->encode("b")) expected.push_back(i);
  EXPECT_EQ(stripped, expected);
}

TEST_F(TokenizerConfigTest, AddBosTokenAndChatTemplateFile) {
  dir_.write("tokenizer_config.json", R"({"add_bos_token": true, "bos_token": {"content": "<s>"},
      "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})");
  auto tok = load();
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ(tok->encode("hi", true).front(), 1);
  EXPECT_NE(tok->encode("hi", false).front(), 1);
  EXPECT_EQ(tok->chat_template(), "D");
  dir_.write("chat_template.jinja", "{{ messages }}");
  EXPECT_EQ(load()->chat_template(), "{{ messages }}");
}

TEST_F(TokenizerConfigTest, LongestAddedTokenWins) {
  dir_.write("added_tokens.json", R"({"<a>": 1200, "<a><b>": 1201, "<b>": 1202})");
  auto tok = load();
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_THAT(tok->encode("<a><b><b>"), ElementsAre(1201, 1202));
  EXPECT_THAT(tok->encode("<a><a>"), ElementsAre(1200, 1200));
}

// ---- errors ----

TEST(TokenizerErrors, MissingFolder) {
  auto tok = Tokenizer::load("/nonexistent/tern-model");
  ASSERT_FALSE(tok.is_ok());
  EXPECT_EQ(tok.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(tok.status().message(), HasSubstr("/nonexistent/tern-model"));
}

TEST(TokenizerErrors, MissingModelFile) {
  testing::TempDir dir;
  dir.write("tokenizer_config.json", "{}");
  auto tok = Tokenizer::load(dir.path());
  ASSERT_FALSE(tok.is_ok());
  EXPECT_EQ(tok.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(tok.status().message(), HasSubstr("tokenizer.model"));
}

TEST(TokenizerErrors, TruncatedOrGarbageModel) {
  std::string model = testing::read_file(testing::fixture_dir() + "/tokenizer.model");
  for (const std::string& bad : {model.substr(0, model.size() / 2), model.substr(0, 3), std::string(),
                                 std::string("this is not a protobuf at all\n"), std::string(64, '\xff')}) {
    testing::TempDir dir;
    dir.write("tokenizer.model", bad);
    auto tok = Tokenizer::load(dir.path());
    ASSERT_FALSE(tok.is_ok()) << bad.size();
    EXPECT_EQ(tok.status().code(), ErrorCode::kParse);
    EXPECT_THAT(tok.status().message(), HasSubstr("tokenizer.model"));
  }
}

TEST(TokenizerErrors, CorruptedModelsFailCleanly) {
  // Byte flips that keep the protobuf well-formed reach SentencePiece's own
  // checks (duplicate pieces, bad byte pieces, ...); none may crash.
  const std::string model = testing::read_file(testing::fixture_dir() + "/tokenizer.model");
  std::mt19937 rng(11);
  int loaded = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::string bad = model;
    for (int k = 0; k < 1 + trial % 4; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    testing::TempDir dir;
    dir.write("tokenizer.model", bad);
    auto tok = Tokenizer::load(dir.path());
    if (tok.is_ok()) {
      ++loaded;
      std::vector<int32_t> ids = tok->encode("hello 你好 <|end_of_sentence|> 𝄞");
      (void)tok->decode(ids);
    } else {
      EXPECT_THAT(tok.status().message(), HasSubstr("tokenizer.model"));
    }
  }
  EXPECT_LT(loaded, 200);
}

TEST(TokenizerErrors, BadJsonNamesTheFile) {
  const std::string model = testing::read_file(testing::fixture_dir() + "/tokenizer.model");
  struct Case {
    const char* file;
    const char* text;
    const char* expected;
  };
  const Case cases[] = {
      {"tokenizer_config.json", "{\"add_bos_token\": fal", "tokenizer_config.json: not valid JSON"},
      {"tokenizer_config.json", "[1, 2]", "tokenizer_config.json: top level is not a JSON object"},
      {"tokenizer_config.json", R"({"add_bos_token": "yes"})", "\"add_bos_token\" is not a boolean"},
      {"tokenizer_config.json", R"({"added_tokens_decoder": []})",
       "\"added_tokens_decoder\" is not an object"},
      {"tokenizer_config.json", R"({"added_tokens_decoder": {"x": {"content": "a"}}})", "token id \"x\""},
      {"tokenizer_config.json", R"({"added_tokens_decoder": {"7": {"content": 5}}})", "\"content\""},
      {"tokenizer_config.json", R"({"eos_token": 5})", "\"eos_token\": expected a string"},
      {"tokenizer_config.json", R"({"chat_template": 5})", "\"chat_template\""},
      {"added_tokens.json", R"({"<x>": "12"})", "added_tokens.json: \"<x>\": token id is not an integer"},
      {"added_tokens.json", R"({"<x>": -1})", "out of range"},
      {"added_tokens.json", R"({"<x>": 2000000000})", "past the limit"},
      {"special_tokens_map.json", "{", "special_tokens_map.json: not valid JSON"},
      {"tokenizer.json", R"({"added_tokens": {}})", "tokenizer.json: \"added_tokens\" is not a list"},
      {"tokenizer.json", R"({"added_tokens": [{"content": "x"}]})", "added token without \"id\""},
  };
  for (const Case& c : cases) {
    testing::TempDir dir;
    dir.write("tokenizer.model", model);
    dir.write(c.file, c.text);
    auto tok = Tokenizer::load(dir.path());
    ASSERT_FALSE(tok.is_ok()) << c.file << " " << c.text;
    EXPECT_THAT(tok.status().message(), HasSubstr(c.expected)) << c.text;
    EXPECT_THAT(tok.status().message(), HasSubstr(dir.path())) << c.text;
  }
}

}  // namespace
}  // namespace tern
