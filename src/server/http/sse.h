// Server-sent events framing: `data: <payload>\n\n` per event and the OpenAI
// terminator `data: [DONE]\n\n`. SseChunkTemplate builds per-token chunks from
// a pre-serialized JSON prefix and suffix around the escaped text, so a
// stream never re-serializes whole JSON objects.
#pragma once

#include <string>
#include <string_view>

namespace tern::server {

inline constexpr std::string_view kSseContentType = "text/event-stream";
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
// A comment line: clients ignore it; proxies see traffic on a quiet stream.
inline constexpr std::string_view kSseKeepAlive = ": keep-alive\n\n";

// Appends one event carrying `payload`. A payload with line breaks becomes one
// `data:` line per line (the SSE rule), so the event still arrives whole.
void append_sse_event(std::string& out, std::string_view payload);
std::string sse_event(std::string_view payload);

// `data: <before><text escaped as JSON><after>\n\n`. `before` normally ends
// with an opening quote and `after` starts with the closing one, e.g.
//   before = {"id":"c1","choices":[{"index":0,"delta":{"content":"
//   after  = "},"finish_reason":null}]}
class SseChunkTemplate {
 public:
  SseChunkTemplate(std::string before, std::string after);
  void append(std::string& out, std::string_view text) const;
  std::string format(std::string_view text) const;

 private:
  std::string head_;  // "data: " + before
  std::string tail_;  // after + "\n\n"
};

}  // namespace tern::server
