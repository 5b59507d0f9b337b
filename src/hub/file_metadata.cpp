// File metadata from the hub's HEAD response headers.
#include "hub/file_metadata.h"

#include <cctype>

#include "hub/hub_cache.h"

namespace tern::hub {

std::string normalize_etag(std::string_view etag) {
  if (etag.rfind("W/", 0) == 0) etag.remove_prefix(2);
  while (!etag.empty() && etag.front() == '"') etag.remove_prefix(1);
  while (!etag.empty() && etag.back() == '"') etag.remove_suffix(1);
  return std::string(etag);
}

bool is_sha256_hex(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

std::optional<int64_t> parse_size(std::string_view text) {
  if (text.empty() || text.size() > 16) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value > (int64_t{1} << 50)) return std::nullopt;
  return value;
}

Result<FileMetadata> file_metadata_from(const HeaderMap& headers, std::string_view file) {
  FileMetadata m;
  const std::string name(file);
  m.commit = find_header(headers, "x-repo-commit").value_or("");
  std::optional<std::string> linked_etag = find_header(headers, "x-linked-etag");
  std::optional<std::string> etag = linked_etag ? linked_etag : find_header(headers, "etag");
  if (!etag) return parse_error(name + ": the hub's answer has no ETag (nor X-Linked-Etag) header");
  m.etag = normalize_etag(*etag);
  if (!is_safe_blob_name(m.etag)) {
    return parse_error(name + ": the hub's ETag '" + m.etag + "' is not a usable blob name");
  }
  m.lfs = linked_etag.has_value() && is_sha256_hex(m.etag);
  std::optional<std::string> size = find_header(headers, "x-linked-size");
  if (!size) size = find_header(headers, "content-length");
  if (!size) return parse_error(name + ": the hub's answer has no X-Linked-Size or Content-Length header");
  std::optional<int64_t> bytes = parse_size(*size);
  if (!bytes) return parse_error(name + ": the hub's size header '" + *size + "' is not a byte count");
  m.size = *bytes;
  if (!m.commit.empty() && !is_safe_blob_name(m.commit)) {
    return parse_error(name + ": the hub's X-Repo-Commit '" + m.commit + "' is not a commit hash");
  }
  m.location = find_header(headers, "location").value_or("");
  return m;
}

}  // namespace tern::hub
