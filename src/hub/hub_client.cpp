// fetch_snapshot: the repo's file list, then each selected file into the cache.
#include "hub/hub_client.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "hub/download_progress.h"
#include "hub/file_metadata.h"
#include "hub/file_selection.h"
#include "hub/http_client.h"
#include "hub/hub_cache.h"
#include "hub/repo_info.h"
#include "hub/sha256.h"

namespace tern::hub {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxAttempts = 5;
constexpr int kMaxRelativeRedirects = 5;
constexpr size_t kMaxRepoInfoBytes = size_t{64} << 20;

struct Fetch {
  const RepoRef& ref;
  const FetchOptions& options;
  const HubSettings& settings;
  HubCache cache;
  HttpClient http;
  int64_t downloaded = 0;
};

// Holds flock(2) on a lock file of the cache's .locks folder (as huggingface_hub's filelock).
class BlobLock {
 public:
  explicit BlobLock(const std::string& path) {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return;  // a read-only .locks folder: go on without the lock
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      spdlog::info("hub: waiting for another process downloading into {}", path);
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~BlobLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_ = -1;
};

int64_t size_or_zero(const std::string& path) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  return ec ? 0 : static_cast<int64_t>(size);
}

std::string origin_of(const std::string& url) {
  size_t scheme = url.find("://");
  size_t path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  return path == std::string::npos ? url : url.substr(0, path);
}

std::string resolve_url(const Fetch& f, const std::string& commit, const std::string& file) {
  return f.settings.endpoint + "/" + f.ref.repo_id + "/resolve/" + commit + "/" + url_encode(file, true);
}

std::string token_advice(const HubSettings& s) {
  if (s.token.empty()) {
    return "HF_TOKEN is not set: if the repo is private or gated, set HF_TOKEN to a token that can read it "
           "(https://huggingface.co/settings/tokens)";
  }
  return "the token from " + s.token_source + " was not accepted for it: check HF_TOKEN";
}

// One message per failure the hub reports, naming the repo, the file and what to do.
Status hub_error(const Fetch& f, const HttpResponse& r, const std::string& file) {
  const std::string code = find_header(r.headers, "x-error-code").value_or("");
  const std::string& repo = f.ref.repo_id;
  const std::string status = "HTTP " + std::to_string(r.status);
  if (r.status == 401) {
    return invalid_argument("the hub refused access to repo " + repo + (file.empty() ? "" : " (file " + file + ")") +
                            " (" + status + " Unauthorized): the repo is private or gated, or does not exist; " +
                            token_advice(f.settings));
  }
  if (r.status == 403) {
    return invalid_argument("access to repo " + repo + " is forbidden (" + status + "): it is gated; accept its terms "
                            "on " + f.settings.endpoint + "/" + repo + " and use a token with access; " +
                            token_advice(f.settings));
  }
  if (r.status == 404 && code == "RevisionNotFound") {
    return not_found("revision '" + f.ref.revision + "' not found in repo " + repo + " (" + status + ")");
  }
  if (r.status == 404 && (!file.empty() || code == "EntryNotFound")) {
    return not_found("file " + file + " not found in repo " + repo + " at revision '" + f.ref.revision + "' (" +
                     status + ")");
  }
  if (r.status == 404) {
    return not_found("repo " + repo + " not found on " + f.settings.endpoint + " (" + status + "); check its name" +
                     (f.settings.token.empty() ? "; if it is private, set HF_TOKEN" : ""));
  }
  std::string body = r.body.substr(0, 200);
  std::replace(body.begin(), body.end(), '\n', ' ');
  return io_error("the hub answered " + status + " for " + (file.empty() ? "repo " + repo : file + " of repo " + repo) +
                  " (" + r.url + ")" + (body.empty() ? "" : ": " + body));
}

Result<RepoInfo> fetch_repo_info(Fetch& f) {
  const std::string url = f.settings.endpoint + "/api/models/" + f.ref.repo_id + "/revision/" +
                          url_encode(f.ref.revision, false);
  TERN_ASSIGN_OR_RETURN(HttpResponse r, f.http.get(url, f.settings.token, kMaxRepoInfoBytes));
  if (r.status != 200) return hub_error(f, r, "");
  return parse_repo_info(r.body, f.ref.repo_id);
}

// HEAD on the resolve URL, following relative redirects (a renamed repo) but
// not the absolute one to the CDN, whose answer carries X-Linked-* headers.
Result<FileMetadata> fetch_metadata(Fetch& f, const std::string& commit, const std::string& file) {
  std::string url = resolve_url(f, commit, file);
  for (int hop = 0; hop <= kMaxRelativeRedirects; ++hop) {
    TERN_ASSIGN_OR_RETURN(HttpResponse r, f.http.head(url, f.settings.token));
    if (r.status >= 300 && r.status < 400) {
      std::string location = find_header(r.headers, "location").value_or("");
      if (location.empty()) {
        return parse_error(file + ": the hub redirected (HTTP " + std::to_string(r.status) + ") without a Location");
      }
      if (location[0] == '/' && location.rfind("//", 0) != 0) {
        url = origin_of(url) + location;
        continue;
      }
    } else if (r.status != 200) {
      return hub_error(f, r, file);
    }
    return file_metadata_from(r.headers, file);
  }
  return parse_error(file + ": more than " + std::to_string(kMaxRelativeRedirects) + " redirects from the hub");
}

// Downloads into blobs/ETAG.incomplete, resuming what is there, checks the
// size and (LFS) the sha256, and moves it to blobs/ETAG.
Status download_blob(Fetch& f, const std::string& commit, const std::string& file, const FileMetadata& m) {
  const std::string partial = f.cache.incomplete_path(m.etag);
  const std::string url = resolve_url(f, commit, file);
  Status last;
  for (int attempt = 1; attempt <= kMaxAttempts; ++attempt) {
    if (attempt > 1) std::this_thread::sleep_for(std::chrono::milliseconds(250 << std::min(attempt - 2, 4)));
    int64_t have = size_or_zero(partial);
    if (have > m.size) {
      fs::remove(partial);
      have = 0;
    }
    if (have < m.size || !fs::exists(partial)) {
      DownloadProgress progress(file, m.size, have, f.options.progress_bar);
      auto r = f.http.download(url, f.settings.token, partial, have, [&](int64_t bytes) { progress.update(bytes); });
      int64_t now = size_or_zero(partial);
      f.downloaded += std::max<int64_t>(0, now - have);
      if (!r.is_ok()) {
        last = r.status();
        spdlog::warn("hub: {}: {} ({} of {} bytes so far); resuming (attempt {} of {})", file, r.status().message(),
                     now, m.size, attempt + 1, kMaxAttempts);
        continue;
      }
      if (r->status == 416) {  // the range is past the server's file: start again
        fs::remove(partial);
        last = io_error(file + ": the hub refused to resume at byte " + std::to_string(have) + " (HTTP 416)");
        continue;
      }
      if (r->status < 200 || r->status >= 300) return hub_error(f, *r, file);
      progress.finish(now);
    }
    const int64_t got = size_or_zero(partial);
    if (got != m.size) {
      last = io_error(file + ": received " + std::to_string(got) + " bytes, the hub announced " +
                      std::to_string(m.size));
      spdlog::warn("hub: {}", last.message());
      if (got > m.size) fs::remove(partial);
      continue;
    }
    if (m.lfs) {
      TERN_ASSIGN_OR_RETURN(std::string sha, sha256_file(partial));
      if (sha != m.etag) {
        last = io_error(file + ": the download's sha256 is " + sha + ", the hub's ETag says " + m.etag);
        spdlog::warn("hub: {} (corrupted); fetching it again", last.message());
        fs::remove(partial);
        continue;
      }
    }
    std::error_code ec;
    fs::rename(partial, f.cache.blob_path(m.etag), ec);
    if (ec) return io_error("cannot move " + partial + " into place: " + ec.message());
    return Status::ok();
  }
  return io_error("could not download " + file + " of repo " + f.ref.repo_id + " after " +
                  std::to_string(kMaxAttempts) + " attempts: " + last.message());
}

bool points_to(const std::string& pointer, const std::string& target) {
  std::error_code ec;
  return fs::is_symlink(pointer, ec) && fs::read_symlink(pointer, ec).string() == target && !ec;
}

Status fetch_file(Fetch& f, const std::string& commit, const std::string& file) {
  TERN_ASSIGN_OR_RETURN(FileMetadata m, fetch_metadata(f, commit, file));
  if (!m.commit.empty() && m.commit != commit) {
    spdlog::warn("hub: {}: the hub resolved it at commit {}, not {}", file, m.commit, commit);
  }
  std::error_code ec;
  fs::create_directories(f.cache.repo_dir() + "/blobs", ec);
  if (ec) return io_error("cannot create " + f.cache.repo_dir() + "/blobs: " + ec.message());
  const std::string blob = f.cache.blob_path(m.etag);
  {
    BlobLock lock(f.cache.lock_path(m.etag));
    if (fs::exists(blob)) {
      int64_t size = size_or_zero(blob);
      if (size != m.size) {
        spdlog::warn("hub: cached {} ({}) has {} bytes, the hub says {}: fetching it again", file, blob, size, m.size);
        fs::remove(blob, ec);
      } else if (f.options.verify_cached && m.lfs) {
        TERN_ASSIGN_OR_RETURN(std::string sha, sha256_file(blob));
        if (sha != m.etag) {
          spdlog::warn("hub: cached {} ({}) is corrupted (sha256 {}, expected {}): fetching it again", file, blob, sha,
                       m.etag);
          fs::remove(blob, ec);
        }
      }
    }
    if (!fs::exists(blob)) TERN_RETURN_IF_ERROR(download_blob(f, commit, file, m));
  }
  const std::string pointer = f.cache.pointer_path(commit, file);
  if (!points_to(pointer, pointer_target(file, m.etag))) {
    TERN_RETURN_IF_ERROR(f.cache.link_pointer(commit, file, m.etag));
  }
  return Status::ok();
}

std::vector<std::string> files_under(const std::string& folder) {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(folder, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_directory(ec)) files.push_back(it->path().lexically_relative(folder).generic_string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

Result<std::vector<std::string>> choose(const Fetch& f, const std::vector<std::string>& files,
                                        std::string& model_file) {
  if (!f.options.include.empty()) {
    std::vector<std::string> chosen = select_matching(files, f.options.include);
    if (chosen.empty()) {
      std::string patterns;
      for (const std::string& p : f.options.include) patterns += (patterns.empty() ? "" : ", ") + p;
      return not_found("no file of repo " + f.ref.repo_id + " matches --include " + patterns);
    }
    return chosen;
  }
  TERN_ASSIGN_OR_RETURN(FileSelection selection, select_model_files(files, f.ref.file, f.ref.repo_id));
  model_file = selection.model_file;
  return selection.files;
}

// The cached snapshot of the revision, when the hub is not asked. `why` ends the
// messages: " and offline mode is on (HF_HUB_OFFLINE=1)" or the network error.
Result<Snapshot> from_cache(const Fetch& f, const std::string& why) {
  const std::string name = "model " + f.ref.repo_id + " (revision " + f.ref.revision + ")";
  std::optional<std::string> commit = f.cache.cached_commit(f.ref.revision);
  std::error_code ec;
  if (!commit || !fs::is_directory(f.cache.snapshot_dir(*commit), ec)) {
    return not_found(name + " is not in the cache (" + f.settings.cache_dir + ")" + why);
  }
  Snapshot s;
  s.repo_id = f.ref.repo_id;
  s.commit = *commit;
  s.folder = f.cache.snapshot_dir(*commit);
  std::string model_file;
  auto chosen = choose(f, files_under(s.folder), model_file);
  if (!chosen.is_ok()) {
    return Status(chosen.status().code(), "the cached snapshot of " + name + " in " + s.folder + " is not usable" +
                                              why + ": " + chosen.status().message());
  }
  for (const std::string& file : *chosen) {
    if (!fs::exists(s.folder + "/" + file, ec)) {
      return not_found("the cached snapshot of " + name + " lists " + file + " but its blob is missing" + why);
    }
  }
  s.files = std::move(chosen).value();
  s.model_path = model_file.empty() ? s.folder : s.folder + "/" + model_file;
  return s;
}

}  // namespace

Result<Snapshot> fetch_snapshot(const RepoRef& ref, const FetchOptions& options, const HubSettings& settings) {
  Fetch f{ref, options, settings, HubCache(settings.cache_dir, ref.repo_id), {}, 0};
  if (settings.offline) return from_cache(f, " and offline mode is on (HF_HUB_OFFLINE=1)");
  auto info = fetch_repo_info(f);
  if (!info.is_ok()) {
    // 401, 404, a bad file list: the answer stands; a network failure or a 5xx falls back to the cache.
    if (info.status().code() != ErrorCode::kIo) return info.status();
    auto cached = from_cache(f, "");
    if (cached.is_ok()) {
      spdlog::warn("hub: cannot reach {} ({}); using the cached snapshot {}", settings.endpoint,
                   info.status().message(), cached->commit);
      return cached;
    }
    return io_error("cannot fetch model " + ref.repo_id + " from " + settings.endpoint + ": " +
                    info.status().message() + "; it is not in the cache (" + settings.cache_dir +
                    ") either; check the network, HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use only the cache");
  }
  Snapshot s;
  s.repo_id = ref.repo_id;
  s.commit = info->commit;
  s.folder = f.cache.snapshot_dir(s.commit);
  std::string model_file;
  TERN_ASSIGN_OR_RETURN(s.files, choose(f, info->files, model_file));
  TERN_RETURN_IF_ERROR(f.cache.write_ref(ref.revision, s.commit));
  for (const std::string& file : s.files) TERN_RETURN_IF_ERROR(fetch_file(f, s.commit, file));
  s.model_path = model_file.empty() ? s.folder : s.folder + "/" + model_file;
  s.downloaded_bytes = f.downloaded;
  return s;
}

}  // namespace tern::hub
