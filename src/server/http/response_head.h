// The status line and header block of a response, written by hand (no Beast
// serializer): the transport owns framing (Content-Length, Transfer-Encoding,
// Connection), and handler-supplied headers that could break the framing or
// inject lines are dropped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/request.h"

namespace tern::server {

struct ResponseFraming {
  std::optional<uint64_t> content_length;  // set: Content-Length
  bool chunked = false;                    // Transfer-Encoding: chunked
  bool keep_alive = true;                  // false: Connection: close
  int request_version = 11;                // HTTP/1.0 keep-alive needs it said
};

// "HTTP/1.1 200 OK\r\n...\r\n\r\n". Headers from `common` then `extra`, in
// order, skipping invalid names/values and the framing headers.
std::string response_head(int status, std::string_view content_type, const ResponseFraming& framing,
                          const std::vector<HttpHeader>& common, const std::vector<HttpHeader>& extra);

bool is_valid_header_name(std::string_view name);
bool is_valid_header_value(std::string_view value);

// "1a2\r\n": the size line of an HTTP/1.1 chunk.
std::string chunk_size_line(size_t size);

}  // namespace tern::server
