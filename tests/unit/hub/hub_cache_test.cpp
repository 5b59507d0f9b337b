// The cache layout huggingface_hub uses: folder names, symlink targets, refs.
#include <gtest/gtest.h>

#include <filesystem>

#include "hub/hub_cache.h"
#include "support/temp_dir.h"

namespace tern::hub {
namespace {

TEST(HubCache, Paths) {
  EXPECT_EQ(repo_folder_name("baidu/ERNIE-4.5-0.3B-PT"), "models--baidu--ERNIE-4.5-0.3B-PT");
  HubCache cache("/c", "org/name");
  EXPECT_EQ(cache.repo_dir(), "/c/models--org--name");
  EXPECT_EQ(cache.blob_path("abc"), "/c/models--org--name/blobs/abc");
  EXPECT_EQ(cache.incomplete_path("abc"), "/c/models--org--name/blobs/abc.incomplete");
  EXPECT_EQ(cache.pointer_path("c0ffee", "sub/f.json"), "/c/models--org--name/snapshots/c0ffee/sub/f.json");
  EXPECT_EQ(cache.ref_path("main"), "/c/models--org--name/refs/main");
  EXPECT_EQ(cache.lock_path("abc"), "/c/.locks/models--org--name/abc.lock");
  EXPECT_EQ(pointer_target("config.json", "e1"), "../../blobs/e1");
  EXPECT_EQ(pointer_target("a/b/model.gguf", "e1"), "../../../../blobs/e1");
}

TEST(HubCache, SafeNames) {
  EXPECT_TRUE(is_safe_repo_file("config.json"));
  EXPECT_TRUE(is_safe_repo_file("gguf/model-Q4_K_M.gguf"));
  for (const char* bad : {"", "/etc/passwd", "../x", "a/../b", "a//b", "a/./b", "a\\b", "a/"})
    EXPECT_FALSE(is_safe_repo_file(bad)) << bad;
  EXPECT_TRUE(is_safe_blob_name("0123abcdef"));
  EXPECT_FALSE(is_safe_blob_name("../x"));
  EXPECT_FALSE(is_safe_blob_name(""));
}

TEST(HubCache, RefsAndPointers) {
  testing::TempDir dir;
  HubCache cache(dir.path(), "org/name");
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  EXPECT_FALSE(cache.cached_commit("main").has_value());
  EXPECT_EQ(cache.cached_commit(commit), commit);
  ASSERT_TRUE(cache.write_ref("main", commit).is_ok());
  EXPECT_EQ(cache.cached_commit("main"), commit);
  ASSERT_TRUE(cache.write_ref("refs/pr/1", commit).is_ok());
  EXPECT_EQ(cache.cached_commit("refs/pr/1"), commit);
  // A ref file that does not hold a commit hash is ignored.
  dir.write("models--org--name/refs/main", "not a commit");
  EXPECT_FALSE(cache.cached_commit("main").has_value());

  std::filesystem::create_directories(dir.path() + "/models--org--name/blobs");
  dir.write("models--org--name/blobs/e1", "{}");
  ASSERT_TRUE(cache.link_pointer(commit, "sub/config.json", "e1").is_ok());
  const std::string pointer = cache.pointer_path(commit, "sub/config.json");
  EXPECT_EQ(std::filesystem::read_symlink(pointer).string(), "../../../blobs/e1");
  EXPECT_EQ(std::filesystem::file_size(pointer), 2u);
  ASSERT_TRUE(cache.link_pointer(commit, "sub/config.json", "e1").is_ok());  // replacing is fine
}

}  // namespace
}  // namespace tern::hub
