// HttpRequest: one parsed HTTP request as handlers see it, with no Beast types.
// The transport fills it after the whole body has arrived (within the header
// and body limits); the handler owns it for the length of the call.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tern::server {

struct HttpHeader {
  std::string name;
  std::string value;
};

// Header fields in arrival order; lookups ignore the case of the name.
class HttpHeaders {
 public:
  void add(std::string name, std::string value);
  // The first field called `name`, if any.
  std::optional<std::string_view> get(std::string_view name) const;
  bool has(std::string_view name) const { return get(name).has_value(); }
  const std::vector<HttpHeader>& all() const { return fields_; }

 private:
  std::vector<HttpHeader> fields_;
};

bool iequals(std::string_view a, std::string_view b);

struct HttpRequest {
  std::string method;      // "GET", "POST", ... as sent (methods are case-sensitive)
  std::string target;      // the raw request-target: "/v1/models?x=1"
  std::string path;        // target before '?', not percent-decoded
  std::string query;       // target after '?', raw ("" if none)
  HttpHeaders headers;
  std::string body;
  std::string remote;      // "127.0.0.1:54321"
  std::string request_id;  // the client's X-Request-Id if usable, else generated
  int version = 11;        // 10 for HTTP/1.0, 11 for HTTP/1.1

  // The percent-decoded value of query parameter `key` ('+' is a space).
  std::optional<std::string> query_param(std::string_view key) const;
};

// Splits "a=1&b=x%20y" into decoded pairs; malformed escapes stay literal.
std::vector<std::pair<std::string, std::string>> parse_query(std::string_view query);
std::string percent_decode(std::string_view s, bool plus_is_space);

// Request ids: the client's X-Request-Id is echoed when it is 1-128 visible
// ASCII characters; otherwise a random 32-hex-digit id is made.
bool is_usable_request_id(std::string_view id);
std::string make_request_id();

}  // namespace tern::server
