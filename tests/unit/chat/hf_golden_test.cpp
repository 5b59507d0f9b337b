// HF-equality checks: every tests/data/<folder>/golden.json, and the demo
// model's (models/ernie-demo), with a
// "tokenizer" list (text, ids, decoded, decoded_skip) and a "chat" list
// (messages, add_generation_prompt, rendered, ids), produced by HF's
// AutoTokenizer on that folder (tools/make_test_model.py), must be reproduced
// exactly. Skipped when no folder has goldens.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/utf8.h"
#include "chat/ernie_chat_format.h"
#include "tokenizer/tokenizer.h"
#include "support/tokenizer_fixture.h"

namespace tern {
namespace {

using nlohmann::json;

std::vector<std::string> golden_folders() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(TERN_TEST_DATA_DIR, ec)) {
    if (!e.is_directory()) continue;
    std::string dir = e.path().string();
    if (std::filesystem::exists(dir + "/golden.json") && std::filesystem::exists(dir + "/tokenizer.model")) {
      out.push_back(dir);
    }
  }
  out.push_back(TERN_DEMO_MODEL_DIR);
  std::sort(out.begin(), out.end());
  return out;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t i : ids) s += std::to_string(i) + " ";
  return s;
}

TEST(HfGolden, TokenizerMatchesHuggingFace) {
  std::vector<std::string> folders = golden_folders();
  if (folders.empty()) GTEST_SKIP() << "no tests/data/*/golden.json yet";
  int checked = 0;
  for (const std::string& dir : folders) {
    json g = json::parse(testing::read_file(dir + "/golden.json"), nullptr, false);
    ASSERT_FALSE(g.is_discarded()) << dir;
    if (!g.contains("tokenizer")) continue;
    auto tok = Tokenizer::load(dir);
    ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
    for (const json& c : g["tokenizer"]) {
      const std::string text = c["text"].get<std::string>();
      const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
      std::vector<int32_t> got = tok->encode(text, /*add_special_tokens=*/true);
      EXPECT_EQ(got, ids) << dir << " text=\"" << text << "\"\n got: " << show(got)
                          << "\nwant: " << show(ids);
      // HF's byte-fallback decoder turns invalid bytes into U+FFFD.
      if (c.contains("decoded")) {
        EXPECT_EQ(utf8_sanitize(tok->decode(ids, false)), c["decoded"].get<std::string>())
            << dir << " " << text;
      }
      if (c.contains("decoded_skip")) {
        EXPECT_EQ(utf8_sanitize(tok->decode(ids, true)), c["decoded_skip"].get<std::string>())
            << dir << " " << text;
      }
      ++checked;
    }
    if (!g.contains("chat")) continue;
    for (const json& c : g["chat"]) {
      std::vector<ChatMessage> messages;
      for (const json& m : c["messages"])
        messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      const std::string rendered = c["rendered"].get<std::string>();
      EXPECT_EQ(render_ernie_chat(messages, c["add_generation_prompt"].get<bool>(), tok->cls_token(),
                                  tok->sep_token()),
                rendered);
      if (c.contains("ids")) {
        EXPECT_EQ(tok->encode(rendered, false), c["ids"].get<std::vector<int32_t>>()) << rendered;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace tern
