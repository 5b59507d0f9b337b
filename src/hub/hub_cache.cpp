// Paths of the hub cache, and its refs and snapshot symlinks.
#include "hub/hub_cache.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "hub/repo_ref.h"

namespace tern::hub {

namespace fs = std::filesystem;

std::string repo_folder_name(std::string_view repo_id) {
  std::string name = "models";
  size_t start = 0;
  while (start <= repo_id.size()) {
    size_t slash = repo_id.find('/', start);
    if (slash == std::string_view::npos) slash = repo_id.size();
    name += "--";
    name += repo_id.substr(start, slash - start);
    start = slash + 1;
  }
  return name;
}

std::string pointer_target(std::string_view file, std::string_view etag) {
  std::string target = "../../";
  for (char c : file)
    if (c == '/') target += "../";
  target += "blobs/";
  target += etag;
  return target;
}

bool is_safe_repo_file(std::string_view file) {
  if (file.empty() || file.size() > 1024 || file.front() == '/') return false;
  size_t start = 0;
  while (start <= file.size()) {
    size_t slash = file.find('/', start);
    if (slash == std::string_view::npos) slash = file.size();
    std::string_view segment = file.substr(start, slash - start);
    if (segment.empty() || segment == "." || segment == "..") return false;
    start = slash + 1;
  }
  for (char c : file)
    if (static_cast<unsigned char>(c) < 0x20 || c == '\\' || c == 0x7f) return false;
  return true;
}

bool is_safe_blob_name(std::string_view name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') return false;
  return true;
}

HubCache::HubCache(std::string cache_dir, std::string_view repo_id)
    : cache_dir_(std::move(cache_dir)), folder_(repo_folder_name(repo_id)), repo_dir_(cache_dir_ + "/" + folder_) {}

std::string HubCache::blob_path(std::string_view etag) const { return repo_dir_ + "/blobs/" + std::string(etag); }

std::string HubCache::snapshot_dir(std::string_view commit) const {
  return repo_dir_ + "/snapshots/" + std::string(commit);
}

std::string HubCache::pointer_path(std::string_view commit, std::string_view file) const {
  return snapshot_dir(commit) + "/" + std::string(file);
}

std::string HubCache::ref_path(std::string_view revision) const {
  return repo_dir_ + "/refs/" + std::string(revision);
}

std::string HubCache::lock_path(std::string_view etag) const {
  return cache_dir_ + "/.locks/" + folder_ + "/" + std::string(etag) + ".lock";
}

std::optional<std::string> HubCache::cached_commit(std::string_view revision) const {
  if (is_commit_hash(revision)) return std::string(revision);
  std::ifstream in(ref_path(revision));
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  std::string commit = text.str();
  while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
  if (!is_commit_hash(commit)) return std::nullopt;
  return commit;
}

Status HubCache::write_ref(std::string_view revision, std::string_view commit) const {
  if (revision == commit) return Status::ok();
  if (cached_commit(revision) == std::string(commit)) return Status::ok();
  std::string path = ref_path(revision);
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << commit;
    if (!out) return io_error("cannot write " + tmp);
  }
  fs::rename(tmp, path, ec);
  if (ec) return io_error("cannot write " + path + ": " + ec.message());
  return Status::ok();
}

Status HubCache::link_pointer(std::string_view commit, std::string_view file, std::string_view etag) const {
  fs::path pointer = pointer_path(commit, file);
  std::error_code ec;
  fs::create_directories(pointer.parent_path(), ec);
  if (ec) return io_error("cannot create " + pointer.parent_path().string() + ": " + ec.message());
  fs::remove(pointer, ec);
  fs::create_symlink(pointer_target(file, etag), pointer, ec);
  if (ec) return io_error("cannot link " + pointer.string() + " to its blob: " + ec.message());
  return Status::ok();
}

}  // namespace tern::hub
