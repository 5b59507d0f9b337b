// HttpHeaders lookups, query-string decoding and request ids.
#include "server/http/request.h"

#include <array>
#include <random>

namespace tern::server {

namespace {

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

void HttpHeaders::add(std::string name, std::string value) {
  fields_.push_back({std::move(name), std::move(value)});
}

std::optional<std::string_view> HttpHeaders::get(std::string_view name) const {
  for (const auto& f : fields_) {
    if (iequals(f.name, name)) return std::string_view(f.value);
  }
  return std::nullopt;
}

std::string percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%' && i + 2 < s.size()) {
      int hi = hex_value(s[i + 1]);
      int lo = hex_value(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && c == '+' ? ' ' : c);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> parse_query(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> out;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (part.empty()) continue;
    size_t eq = part.find('=');
    std::string_view key = part.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1);
    out.emplace_back(percent_decode(key, true), percent_decode(value, true));
  }
  return out;
}

std::optional<std::string> HttpRequest::query_param(std::string_view key) const {
  for (auto& [k, v] : parse_query(query)) {
    if (k == key) return std::move(v);
  }
  return std::nullopt;
}

bool is_usable_request_id(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

std::string make_request_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  for (int half = 0; half < 2; ++half) {
    uint64_t bits = rng();
    for (int i = 0; i < 16; ++i) id[half * 16 + i] = kHex[(bits >> (4 * i)) & 0xf];
  }
  return id;
}

}  // namespace tern::server
