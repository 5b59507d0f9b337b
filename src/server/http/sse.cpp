// SSE event formatting.
#include "server/http/sse.h"

#include "server/http/json_escape.h"

namespace tern::server {

void append_sse_event(std::string& out, std::string_view payload) {
  if (payload.find_first_of("\r\n") == std::string_view::npos) {
    out.reserve(out.size() + payload.size() + 8);
    out += "data: ";
    out += payload;
    out += "\n\n";
    return;
  }
  // Split on \r\n, \n or \r: each line gets its own data: field.
  size_t start = 0;
  while (true) {
    size_t end = payload.find_first_of("\r\n", start);
    out += "data: ";
    out += payload.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    out += '\n';
    if (end == std::string_view::npos) break;
    start = end + 1;
    if (payload[end] == '\r' && start < payload.size() && payload[start] == '\n') ++start;
  }
  out += '\n';
}

std::string sse_event(std::string_view payload) {
  std::string out;
  append_sse_event(out, payload);
  return out;
}

SseChunkTemplate::SseChunkTemplate(std::string before, std::string after)
    : head_("data: " + before), tail_(std::move(after) + "\n\n") {}

void SseChunkTemplate::append(std::string& out, std::string_view text) const {
  out.reserve(out.size() + head_.size() + text.size() + tail_.size() + 8);
  out += head_;
  append_json_escaped(out, text);
  out += tail_;
}

std::string SseChunkTemplate::format(std::string_view text) const {
  std::string out;
  append(out, text);
  return out;
}

}  // namespace tern::server
