// What a HEAD request on the hub's resolve URL says about one file: the
// commit it resolved to (X-Repo-Commit), its ETag (X-Linked-Etag for LFS
// files, whose ETag is the sha256 of the content; else ETag, the git blob
// id), its size (X-Linked-Size, else Content-Length) and, for LFS files, the
// CDN address it redirects to (Location).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "hub/http_response.h"

namespace tern::hub {

struct FileMetadata {
  std::string commit;  // empty when the server sent no X-Repo-Commit
  std::string etag;    // normalized: no quotes, no W/ prefix
  int64_t size = 0;
  std::string location;  // a redirect target, or empty
  bool lfs = false;      // the ETag is the content's sha256 (X-Linked-Etag, 64 hex digits)
};

// "W/\"abc\"" -> "abc".
std::string normalize_etag(std::string_view etag);

bool is_sha256_hex(std::string_view text);

// A decimal byte count, 0 .. 2^50; std::nullopt for anything else.
std::optional<int64_t> parse_size(std::string_view text);

// Reads the metadata from a HEAD response's headers. Errors (kParse) name the
// file and the header that is missing or malformed.
Result<FileMetadata> file_metadata_from(const HeaderMap& headers, std::string_view file);

}  // namespace tern::hub
