// Bounded rendering of JSON values for error messages (see json_util.h).
#include "formats/json_util.h"

#include <nlohmann/json.hpp>

namespace tern {
namespace {

using nlohmann::json;

constexpr size_t kMaxChars = 60;
constexpr int kMaxDepth = 3;

// Strings are cut before quoting; invalid UTF-8 becomes U+FFFD instead of
// throwing as dump() would by default.
std::string quoted(const std::string& s) {
  return json(s.substr(0, kMaxChars)).dump(-1, ' ', false, json::error_handler_t::replace);
}

void render_brief(const json& v, int depth, std::string& out) {
  if (out.size() > kMaxChars) return;
  if (v.is_array() || v.is_object()) {
    const bool array = v.is_array();
    if (depth >= kMaxDepth) {
      out += array ? "[...]" : "{...}";
      return;
    }
    out += array ? '[' : '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ',';
      first = false;
      if (out.size() > kMaxChars) {
        out += "...";
        break;
      }
      if (!array) out += quoted(it.key()) + ":";
      render_brief(it.value(), depth + 1, out);
    }
    out += array ? ']' : '}';
  } else if (const auto* s = v.get_ptr<const json::string_t*>()) {
    out += quoted(*s);
  } else {
    out += v.dump();  // a scalar: short, no recursion
  }
}

}  // namespace

std::string json_brief(const json& v) {
  std::string text;
  render_brief(v, 0, text);
  return std::string(v.type_name()) + " " + text;
}

}  // namespace tern
