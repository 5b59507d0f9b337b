// The ERNIE chat template rendered exactly as MODEL.md specifies.
#include "chat/ernie_chat_format.h"

#include <gtest/gtest.h>

namespace tern {
namespace {

TEST(ErnieChatTemplate, ModelMdExample) {
  std::vector<ChatMessage> m = {{"system", "SYS"}, {"user", "U"}, {"assistant", "A"}};
  EXPECT_EQ(render_ernie_chat(m, true),
            "<|begin_of_sentence|>SYS\nUser: U\nAssistant: A<|end_of_sentence|>Assistant: ");
}

TEST(ErnieChatTemplate, WithoutGenerationPrompt) {
  std::vector<ChatMessage> m = {{"user", "你好"}, {"assistant", "你好！"}};
  EXPECT_EQ(render_ernie_chat(m, false),
            "<|begin_of_sentence|>User: 你好\nAssistant: 你好！<|end_of_sentence|>");
}

TEST(ErnieChatTemplate, OtherRolesAreDroppedAndContentIsVerbatim) {
  std::vector<ChatMessage> m = {
      {"tool", "dropped"}, {"user", "  two\n\nlines  "}, {"function", "dropped"}, {"developer", "dropped"}};
  EXPECT_EQ(render_ernie_chat(m, true), "<|begin_of_sentence|>User:   two\n\nlines  \nAssistant: ");
}

TEST(ErnieChatTemplate, EmptyConversationAndCustomTokens) {
  EXPECT_EQ(render_ernie_chat({}, true), "<|begin_of_sentence|>Assistant: ");
  EXPECT_EQ(render_ernie_chat({}, false), "<|begin_of_sentence|>");
  EXPECT_EQ(render_ernie_chat({{"assistant", "x"}}, false, "<cls>", "<sep>"), "<cls>Assistant: x<sep>");
}

}  // namespace
}  // namespace tern
