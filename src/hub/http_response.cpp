// Header lines into a HeaderMap.
#include "hub/http_response.h"

#include <algorithm>
#include <cctype>

namespace tern::hub {

void add_header_line(std::string_view line, HeaderMap& headers) {
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  if (line.rfind("HTTP/", 0) == 0) {
    headers.clear();
    return;
  }
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return;
  std::string name(line.substr(0, colon));
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  headers[name] = std::string(value);
}

std::optional<std::string> find_header(const HeaderMap& headers, std::string_view lower_case_name) {
  auto it = headers.find(std::string(lower_case_name));
  if (it == headers.end()) return std::nullopt;
  return it->second;
}

}  // namespace tern::hub
