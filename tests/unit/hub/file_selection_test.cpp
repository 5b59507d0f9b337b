// Which files of a repo a model needs, and the repo info JSON they come from.
#include <gtest/gtest.h>

#include "hub/download_progress.h"
#include "hub/file_selection.h"
#include "hub/repo_info.h"
#include "hub/sha256.h"

namespace tern::hub {
namespace {

const std::vector<std::string> kErnieRepo = {
    ".gitattributes",          "LICENSE",           "README.md",         "added_tokens.json",
    "config.json",             "configuration_ernie4_5.py", "generation_config.json", "model.safetensors",
    "modeling_ernie4_5.py",    "special_tokens_map.json",   "tokenization_ernie4_5.py", "tokenizer.model",
    "tokenizer_config.json"};

TEST(FileSelection, SafetensorsModelTakesConfigTokenizerAndWeights) {
  auto s = select_model_files(kErnieRepo, "", "baidu/ERNIE-4.5-0.3B-PT");
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  EXPECT_EQ(s->files, (std::vector<std::string>{"added_tokens.json", "config.json", "generation_config.json",
                                                "model.safetensors", "special_tokens_map.json", "tokenizer.model",
                                                "tokenizer_config.json"}));
  EXPECT_EQ(s->model_file, "");
}

TEST(FileSelection, ShardedWeightsWithIndexAndNoSubfolders) {
  auto s = select_model_files({"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                               "model.safetensors.index.json", "original/consolidated.safetensors", "x.gguf"},
                              "", "o/n");
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->files, (std::vector<std::string>{"config.json", "model-00001-of-00002.safetensors",
                                                "model-00002-of-00002.safetensors", "model.safetensors.index.json"}));
}

TEST(FileSelection, GgufByNameOrTag) {
  const std::vector<std::string> repo = {"README.md", "m-Q4_K_M.gguf", "m-Q8_0.gguf", "m-BF16.gguf"};
  auto by_name = select_model_files(repo, "m-Q8_0.gguf", "o/n");
  ASSERT_TRUE(by_name.is_ok());
  EXPECT_EQ(by_name->files, std::vector<std::string>{"m-Q8_0.gguf"});
  EXPECT_EQ(by_name->model_file, "m-Q8_0.gguf");
  auto by_tag = select_model_files(repo, "q4_k_m", "o/n");
  ASSERT_TRUE(by_tag.is_ok());
  EXPECT_EQ(by_tag->model_file, "m-Q4_K_M.gguf");

  auto missing = select_model_files(repo, "Q2_K", "o/n");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("m-Q8_0.gguf"), std::string::npos) << "lists what the repo has";
  auto several = select_model_files(repo, "", "o/n");
  ASSERT_FALSE(several.is_ok());
  EXPECT_NE(several.status().message().find("o/n:FILE.gguf"), std::string::npos) << "says how to choose";
  auto ambiguous = select_model_files(repo, "Q", "o/n");
  EXPECT_FALSE(ambiguous.is_ok());
  auto only = select_model_files({"README.md", "m-Q4_0.gguf"}, "", "o/n");
  ASSERT_TRUE(only.is_ok());
  EXPECT_EQ(only->model_file, "m-Q4_0.gguf");
}

TEST(FileSelection, ReposTernCannotLoad) {
  auto none = select_model_files({"README.md", "model.pdparams"}, "", "baidu/ERNIE-4.5-0.3B-Paddle");
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("baidu/ERNIE-4.5-0.3B-Paddle"), std::string::npos);
  EXPECT_FALSE(select_model_files({"model.safetensors"}, "", "o/n").is_ok()) << "no config.json";
}

TEST(FileSelection, IncludePatterns) {
  EXPECT_EQ(select_matching(kErnieRepo, {"*.json"}),
            (std::vector<std::string>{"added_tokens.json", "config.json", "generation_config.json",
                                      "special_tokens_map.json", "tokenizer_config.json"}));
  EXPECT_EQ(select_matching(kErnieRepo, {"README.md", "LICENSE"}), (std::vector<std::string>{"LICENSE", "README.md"}));
  EXPECT_TRUE(select_matching(kErnieRepo, {"*.gguf"}).empty());
}

TEST(RepoInfo, ParsesShaAndSiblings) {
  auto info = parse_repo_info(R"({"id":"o/n","sha":"0123456789abcdef0123456789abcdef01234567",
      "siblings":[{"rfilename":"config.json"},{"rfilename":"../evil"},{"x":1},7,{"rfilename":"a/b.gguf"}]})",
                              "o/n");
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info->commit, "0123456789abcdef0123456789abcdef01234567");
  EXPECT_EQ(info->files, (std::vector<std::string>{"config.json", "a/b.gguf"}));
}

TEST(RepoInfo, MalformedAnswersAreErrorsNamingTheRepo) {
  for (const char* bad : {"", "{", "[]", "null", R"({"sha":"main","siblings":[]})", R"({"sha":"x"})",
                          R"({"sha":"0123456789abcdef0123456789abcdef01234567","siblings":{}})"}) {
    auto info = parse_repo_info(bad, "org/name");
    ASSERT_FALSE(info.is_ok()) << bad;
    EXPECT_NE(info.status().message().find("org/name"), std::string::npos);
  }
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_FALSE(sha256_file("/nonexistent/file").is_ok());
}

TEST(DownloadProgress, BarLine) {
  std::string line = DownloadProgress::bar_line("model.safetensors", 50'000'000, 100'000'000, 25e6, 10);
  EXPECT_EQ(line, "model.safetensors  50% [#####     ] 50.0/100.0 MB  25.0 MB/s");
  EXPECT_NE(DownloadProgress::bar_line("f", 5, 0, 0, 4).find("100%"), std::string::npos);
}

}  // namespace
}  // namespace tern::hub
