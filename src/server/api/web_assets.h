// The chat page's files (web/ and the Debian JavaScript libraries it uses),
// embedded in the binary at build time: cmake/embed_web_assets.cmake writes
// the definition of web_assets() from the list in cmake/web_assets.cmake.
// Immutable static data, safe to read from any thread.
#pragma once

#include <span>
#include <string_view>

namespace tern::server {

struct WebAsset {
  std::string_view path;          // URL path: "/", "/web/app.js", "/web/lib/marked.min.js"
  std::string_view content_type;  // "text/javascript; charset=utf-8"
  std::string_view etag;          // quoted, from the file's SHA-256: "\"0c769f96917b8b5a21bd\""
  std::string_view body;
  std::string_view source;        // the page's own files: path in the source tree ("web/app.js"); "" for libraries
};

std::span<const WebAsset> web_assets();

}  // namespace tern::server
