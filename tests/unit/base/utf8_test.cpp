#include "base/utf8.h"

#include <gtest/gtest.h>

namespace tern {
namespace {

TEST(Utf8, CompletePrefixHoldsBackSplitCharacter) {
  std::string ni = "\xe4\xbd\xa0";  // 你
  EXPECT_EQ(utf8_complete_prefix(ni), 3u);
  EXPECT_EQ(utf8_complete_prefix(ni.substr(0, 1)), 0u);
  EXPECT_EQ(utf8_complete_prefix(ni.substr(0, 2)), 0u);
  EXPECT_EQ(utf8_complete_prefix("ab" + ni.substr(0, 2)), 2u);
  std::string emoji = "\xf0\x9f\x98\x80";  // 😀
  EXPECT_EQ(utf8_complete_prefix("x" + emoji.substr(0, 3)), 1u);
}

TEST(Utf8, InvalidBytesDoNotStall) {
  EXPECT_EQ(utf8_complete_prefix("\xff" "a"), 2u);
  EXPECT_EQ(utf8_complete_prefix("\xe4" "a"), 2u);  // broken sequence: counted, not held
}

TEST(Utf8, Validation) {
  EXPECT_TRUE(utf8_valid("hello 你好 😀"));
  EXPECT_FALSE(utf8_valid("\xc0\x80"));          // overlong
  EXPECT_FALSE(utf8_valid("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(utf8_valid("\xf4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_EQ(utf8_sanitize("a\xffz"), "a\xef\xbf\xbdz");
}

TEST(Utf8, AppendRoundTrips) {
  std::string s;
  for (char32_t cp : {U'a', U'é', U'你', U'😀'}) utf8_append(s, cp);
  EXPECT_EQ(s, "a\xc3\xa9\xe4\xbd\xa0\xf0\x9f\x98\x80");
}

}  // namespace
}  // namespace tern
