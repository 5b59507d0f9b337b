// ORG/NAME[@REVISION][:FILE] parsing and the repo name rules.
#include <gtest/gtest.h>

#include "hub/repo_ref.h"

namespace tern::hub {
namespace {

TEST(RepoRef, NameAloneTakesMain) {
  auto ref = parse_repo_ref("baidu/ERNIE-4.5-0.3B-PT");
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  EXPECT_EQ(ref->repo_id, "baidu/ERNIE-4.5-0.3B-PT");
  EXPECT_EQ(ref->revision, "main");
  EXPECT_EQ(ref->file, "");
}

TEST(RepoRef, RevisionAndFile) {
  auto ref = parse_repo_ref("org/model-GGUF@v1.0:model-Q4_K_M.gguf");
  ASSERT_TRUE(ref.is_ok());
  EXPECT_EQ(ref->repo_id, "org/model-GGUF");
  EXPECT_EQ(ref->revision, "v1.0");
  EXPECT_EQ(ref->file, "model-Q4_K_M.gguf");
  EXPECT_EQ(to_string(*ref), "org/model-GGUF@v1.0:model-Q4_K_M.gguf");

  auto tag = parse_repo_ref("org/model-GGUF:Q8_0");
  ASSERT_TRUE(tag.is_ok());
  EXPECT_EQ(tag->revision, "main");
  EXPECT_EQ(tag->file, "Q8_0");

  auto pr = parse_repo_ref("org/m@refs/pr/3");
  ASSERT_TRUE(pr.is_ok());
  EXPECT_EQ(pr->revision, "refs/pr/3");
}

TEST(RepoRef, RejectsPathsAndMalformedNames) {
  for (const char* bad : {"", "model", "./models/ernie", "/abs/path", "a/b/c", "org/", "/name", "-org/name",
                          "org/name.", "org/na--me", "org/na..me", "org/name@", "org/name@../x", "org/name:",
                          "org/name:../../etc/passwd", "org/name@a//b", "org/na me"}) {
    auto ref = parse_repo_ref(bad);
    EXPECT_FALSE(ref.is_ok()) << bad;
    EXPECT_FALSE(looks_like_repo_ref(bad)) << bad;
  }
  auto ref = parse_repo_ref("tests/data/../ernie");
  EXPECT_FALSE(ref.is_ok());
  EXPECT_NE(parse_repo_ref("org").status().message().find("ORG/NAME"), std::string::npos);
}

TEST(RepoRef, CommitHashes) {
  EXPECT_TRUE(is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
  EXPECT_FALSE(is_commit_hash("main"));
  EXPECT_FALSE(is_commit_hash("0123456789abcdef0123456789abcdef0123456"));
}

}  // namespace
}  // namespace tern::hub
