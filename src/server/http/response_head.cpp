// Response heads and chunk size lines.
#include "server/http/response_head.h"

#include "server/http/error.h"

namespace tern::server {

namespace {

bool is_framing_header(std::string_view name) {
  return iequals(name, "content-length") || iequals(name, "transfer-encoding") || iequals(name, "connection") ||
         iequals(name, "content-type");
}

bool status_has_body(int status) { return !(status < 200 || status == 204 || status == 304); }

void append_header(std::string& out, std::string_view name, std::string_view value) {
  out += name;
  out += ": ";
  out += value;
  out += "\r\n";
}

}  // namespace

bool is_valid_header_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

bool is_valid_header_value(std::string_view value) {
  for (char c : value) {
    auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && u != '\t') || u == 0x7f) return false;
  }
  return true;
}

std::string response_head(int status, std::string_view content_type, const ResponseFraming& framing,
                          const std::vector<HttpHeader>& common, const std::vector<HttpHeader>& extra) {
  std::string out;
  out.reserve(256);
  out += "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += http_reason(status);
  out += "\r\n";
  append_header(out, "Server", "tern");
  if (!content_type.empty() && is_valid_header_value(content_type)) append_header(out, "Content-Type", content_type);
  if (framing.chunked) {
    append_header(out, "Transfer-Encoding", "chunked");
  } else if (framing.content_length && status_has_body(status)) {
    append_header(out, "Content-Length", std::to_string(*framing.content_length));
  }
  if (!framing.keep_alive) {
    append_header(out, "Connection", "close");
  } else if (framing.request_version < 11) {
    append_header(out, "Connection", "keep-alive");
  }
  for (const auto* list : {&common, &extra}) {
    for (const auto& h : *list) {
      if (is_framing_header(h.name) || !is_valid_header_name(h.name) || !is_valid_header_value(h.value)) continue;
      append_header(out, h.name, h.value);
    }
  }
  out += "\r\n";
  return out;
}

std::string chunk_size_line(size_t size) {
  static constexpr char kHex[] = "0123456789abcdef";
  char buf[20];
  int n = 0;
  do {
    buf[n++] = kHex[size & 0xf];
    size >>= 4;
  } while (size != 0);
  std::string out;
  out.reserve(static_cast<size_t>(n) + 2);
  while (n > 0) out.push_back(buf[--n]);
  out += "\r\n";
  return out;
}

}  // namespace tern::server
