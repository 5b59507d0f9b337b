// Fetches a model (or chosen files) of a Hugging Face hub repo into the hub
// cache and returns the snapshot folder, as huggingface_hub's
// snapshot_download does: one GET of the repo's file list
// (/api/models/ORG/NAME/revision/REV), then per file a HEAD on
// /ORG/NAME/resolve/COMMIT/FILE for its ETag and size, and a GET (following
// the redirect to the CDN) into blobs/ETAG.incomplete, resumed with Range
// after a cut connection or an interrupted run. Sizes are checked, and the
// sha256 of LFS files; a blob that fails is fetched again. Files already in
// the cache are not fetched. Offline (HF_HUB_OFFLINE), the cached snapshot
// of the revision is used. Runs on the calling thread; safe to run in several
// processes at once on one cache (each blob is written under a file lock).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "hub/hub_settings.h"
#include "hub/repo_ref.h"

namespace tern::hub {

struct FetchOptions {
  // Shell-style patterns: fetch the files matching them instead of the model's files.
  std::vector<std::string> include;
  // Re-hash cached LFS blobs and fetch again those whose sha256 is not their ETag
  // (otherwise cached blobs are checked by size only).
  bool verify_cached = false;
  // Draw a progress bar on stderr (else progress goes to the log).
  bool progress_bar = false;
};

struct Snapshot {
  std::string repo_id;
  std::string commit;
  std::string folder;               // CACHE/models--ORG--NAME/snapshots/COMMIT
  std::string model_path;           // the folder, or the chosen GGUF file in it
  std::vector<std::string> files;   // the files fetched or found, repo-relative
  int64_t downloaded_bytes = 0;     // bytes transferred by this call
};

// Errors name the repo, the file, HF_TOKEN (401/403), HF_HUB_OFFLINE and the
// cache folder where those matter.
Result<Snapshot> fetch_snapshot(const RepoRef& ref, const FetchOptions& options, const HubSettings& settings);

}  // namespace tern::hub
