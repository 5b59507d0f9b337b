// Bounded JSON parsing of request bodies (see the header).
#include "server/api/request_json.h"

#include "base/utf8.h"
#include "server/http/json_escape.h"

namespace tern::server {

size_t json_depth_exceeded_at(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

std::variant<nlohmann::json, std::string> parse_request_json(std::string_view body) {
  if (size_t at = json_depth_exceeded_at(body); at != std::string_view::npos) {
    return "the request body nests deeper than " + std::to_string(kMaxRequestJsonDepth) +
           " levels of arrays and objects (at byte " + std::to_string(at) + ")";
  }
  try {
    return nlohmann::json::parse(body);
  } catch (const nlohmann::json::parse_error& e) {
    // what(): "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error while parsing
    // value - invalid literal; last read: '...'". Kept: the reason, without the echo of the bytes read.
    std::string what = e.what();
    size_t dash = what.find(" - ");
    std::string reason = dash == std::string::npos ? "syntax error" : what.substr(dash + 3);
    if (size_t last = reason.find("; last read"); last != std::string::npos) reason.resize(last);
    if (body.empty()) reason = "the body is empty";
    return "the request body is not valid JSON: " + utf8_sanitize(reason) + " (at byte " +
           std::to_string(e.byte > 0 ? e.byte - 1 : 0) + ")";
  } catch (const nlohmann::json::exception& e) {
    return std::string("the request body is not valid JSON: ") + utf8_sanitize(e.what());
  }
}

std::string dump_json(const nlohmann::json& j) {
  std::string out = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  escape_unicode_line_breaks(out);
  return out;
}

}  // namespace tern::server
