// A small HTTP client over libcurl for the hub: HEAD without following
// redirects (the hub's redirect to its CDN carries the file's metadata),
// GET of a small body, and GET of a large body appended to a file from a
// byte offset (Range), for resumable downloads. One client per thread.
// Transport failures (refused, cut, timed out) are kIo errors; an HTTP error
// status is a response, for the caller to explain.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "hub/http_response.h"

namespace tern::hub {

class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // `token`, when not empty, goes as "Authorization: Bearer TOKEN" to the
  // URL's host only (libcurl drops it on a redirect to another host).
  Result<HttpResponse> head(const std::string& url, const std::string& token);

  // Follows redirects; a body past `max_bytes` is an error.
  Result<HttpResponse> get(const std::string& url, const std::string& token, size_t max_bytes);

  // Follows redirects. Writes the body into `path` from byte `offset` on,
  // asking for "Range: bytes=OFFSET-"; a server that answers 200 instead of
  // 206 rewrites the file from the start. An error status's body is kept in
  // the response, not written. `on_bytes` gets the file's size as it grows.
  Result<HttpResponse> download(const std::string& url, const std::string& token, const std::string& path,
                                int64_t offset, const std::function<void(int64_t)>& on_bytes);

 private:
  void* curl_;  // CURL*
};

// Percent-encodes everything but letters, digits and -._~ (and '/' when keep_slash).
std::string url_encode(std::string_view text, bool keep_slash);

}  // namespace tern::hub
