// Streaming detokenization: a character split over byte-fallback tokens is
// emitted once, complete, never as U+FFFD, and the streamed pieces add up to
// exactly what decode() gives for the whole sequence.
#include "tokenizer/detokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/utf8.h"
#include "support/tokenizer_fixture.h"

namespace tern {
namespace {

const std::string kReplacement = "\xef\xbf\xbd";

class DetokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { tok_ = &testing::fixture_tokenizer(); }
  static std::vector<std::string> stream(const std::vector<int32_t>& ids, bool skip_special) {
    Detokenizer d(*tok_, skip_special);
    std::vector<std::string> out;
    for (int32_t id : ids) out.push_back(d.push(id));
    out.push_back(d.flush());
    return out;
  }
  static const Tokenizer* tok_;
};
const Tokenizer* DetokenizerTest::tok_ = nullptr;

TEST_F(DetokenizerTest, SplitCharacterAppearsOnceWhenComplete) {
  std::vector<int32_t> ids = tok_->encode("a龘b");  // 龘 = <0xE9><0xBE><0x98>
  ASSERT_EQ(ids.size(), 5u);
  std::vector<std::string> parts = stream(ids, true);
  EXPECT_THAT(parts, ::testing::ElementsAre("a", "", "", "龘", "b", ""));
}

TEST_F(DetokenizerTest, StreamEqualsDecodeAndNeverEmitsReplacement) {
  const std::string text = "<|begin_of_sentence|>你好𝄞世界 龘 ok 😀🎉\n  code  <|end_of_sentence|>ꙮ";
  std::vector<int32_t> ids = tok_->encode(text);
  for (bool skip : {false, true}) {
    std::vector<std::string> parts = stream(ids, skip);
    std::string joined;
    for (const std::string& p : parts) {
      EXPECT_TRUE(utf8_valid(p)) << p;
      EXPECT_EQ(p.find(kReplacement), std::string::npos) << p;
      joined += p;
    }
    EXPECT_EQ(joined, tok_->decode(ids, skip)) << skip;
  }
  std::string all;
  for (const std::string& p : stream(ids, false)) all += p;
  EXPECT_EQ(all, text);
}

TEST_F(DetokenizerTest, EachCharacterEmittedExactlyOnce) {
  const std::string text = "𝄞龘𝄞";
  std::vector<int32_t> ids = tok_->encode(text);
  ASSERT_EQ(ids.size(), 11u);  // 4 + 3 + 4 byte pieces
  std::vector<std::string> parts = stream(ids, true);
  std::vector<std::string> nonempty;
  for (const std::string& p : parts)
    if (!p.empty()) nonempty.push_back(p);
  EXPECT_THAT(nonempty, ::testing::ElementsAre("𝄞", "龘", "𝄞"));
}

TEST_F(DetokenizerTest, SpecialTokensFollowTheSkipFlag) {
  const int32_t sep = *tok_->sep_id();
  EXPECT_THAT(stream({sep}, true), ::testing::ElementsAre("", ""));
  EXPECT_THAT(stream({sep}, false), ::testing::ElementsAre("<|end_of_sentence|>", ""));
}

TEST_F(DetokenizerTest, FlushReplacesAnIncompleteTail) {
  Detokenizer d(*tok_, true);
  EXPECT_EQ(d.push(*tok_->piece_to_id("<0xE9>")), "");
  EXPECT_EQ(d.push(*tok_->piece_to_id("<0xBE>")), "");
  EXPECT_EQ(d.flush(), kReplacement + kReplacement);
  EXPECT_EQ(d.flush(), "");
}

TEST_F(DetokenizerTest, BrokenSequenceDoesNotStallTheStream) {
  // A lead byte followed by ASCII can never complete: it is replaced and the
  // stream goes on instead of holding everything back.
  Detokenizer d(*tok_, true);
  EXPECT_EQ(d.push(*tok_->piece_to_id("<0xE9>")), "");
  std::vector<int32_t> a = tok_->encode("a");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(d.push(a[0]), kReplacement + "a");
  EXPECT_EQ(d.push(-3), "");  // out of range: nothing
  EXPECT_EQ(d.flush(), "");
}

}  // namespace
}  // namespace tern
