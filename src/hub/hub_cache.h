// The Hugging Face hub cache, laid out as huggingface_hub lays it out so each
// reuses what the other downloaded:
//   CACHE/models--ORG--NAME/blobs/ETAG            the file's bytes, named by its ETag
//                                                 (the sha256 for LFS files, the git blob id otherwise)
//   CACHE/models--ORG--NAME/blobs/ETAG.incomplete a download in progress, resumed from its size
//   CACHE/models--ORG--NAME/snapshots/COMMIT/FILE a relative symlink to ../../blobs/ETAG
//   CACHE/models--ORG--NAME/refs/REVISION         the commit hash a branch or tag pointed to
//   CACHE/.locks/models--ORG--NAME/ETAG.lock      flock(2) while one process downloads a blob
// Paths only, plus the small reads and writes of refs and symlinks.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tern::hub {

// "baidu/ERNIE-4.5-0.3B-PT" -> "models--baidu--ERNIE-4.5-0.3B-PT".
std::string repo_folder_name(std::string_view repo_id);

// The symlink target from snapshots/COMMIT/FILE to blobs/ETAG: "../../blobs/ETAG",
// one more "../" for each folder in FILE.
std::string pointer_target(std::string_view file, std::string_view etag);

// A repo file name safe to join under a snapshot folder: relative, no "." or
// ".." segments, no empty segments, no backslashes or control characters.
bool is_safe_repo_file(std::string_view file);

// An ETag or commit usable as a file name: letters, digits, '-', '_' only.
bool is_safe_blob_name(std::string_view name);

class HubCache {
 public:
  HubCache(std::string cache_dir, std::string_view repo_id);

  const std::string& cache_dir() const { return cache_dir_; }
  const std::string& repo_dir() const { return repo_dir_; }
  std::string blob_path(std::string_view etag) const;
  std::string incomplete_path(std::string_view etag) const { return blob_path(etag) + ".incomplete"; }
  std::string snapshot_dir(std::string_view commit) const;
  std::string pointer_path(std::string_view commit, std::string_view file) const;
  std::string ref_path(std::string_view revision) const;
  std::string lock_path(std::string_view etag) const;

  // The commit `revision` names in the cache: itself when it is a commit
  // hash, else the content of refs/REVISION; nullopt when neither.
  std::optional<std::string> cached_commit(std::string_view revision) const;

  // Records that `revision` points to `commit` (nothing for a commit hash).
  Status write_ref(std::string_view revision, std::string_view commit) const;

  // snapshots/COMMIT/FILE -> the blob, replacing what was there.
  Status link_pointer(std::string_view commit, std::string_view file, std::string_view etag) const;

 private:
  std::string cache_dir_;
  std::string folder_;
  std::string repo_dir_;
};

}  // namespace tern::hub
