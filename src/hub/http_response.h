// An HTTP response as the hub client sees it: status, headers (names in lower
// case, the last value of a repeated header) and, for small requests, the body.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace tern::hub {

using HeaderMap = std::map<std::string, std::string>;

// Adds one raw header line ("Name: value\r\n") to `headers`; a status line
// ("HTTP/1.1 302 Found") clears them, so after redirects only the last
// response's headers remain. Lines without a ':' are ignored.
void add_header_line(std::string_view line, HeaderMap& headers);

std::optional<std::string> find_header(const HeaderMap& headers, std::string_view lower_case_name);

struct HttpResponse {
  long status = 0;
  HeaderMap headers;
  std::string body;
  std::string url;  // the URL that answered, after redirects
};

}  // namespace tern::hub
