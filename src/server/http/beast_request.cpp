// Parser set-up, framing check, conversion and read-error answers shared by
// Connection and the HTTP fuzzer.
#include "server/http/beast_request.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>

#include "server/http/server.h"

namespace tern::server {

namespace http = boost::beast::http;

void apply_limits(BeastRequestParser& parser, const HttpServerOptions& options) {
  parser.header_limit(options.max_header_bytes);
  parser.body_limit(options.max_body_bytes);
}

std::optional<ReadRefusal> check_framing(const BeastRequestParser& parser) {
  if (parser.get().count(http::field::transfer_encoding) > 0 && !parser.chunked()) {
    return ReadRefusal{400, "Unsupported Transfer-Encoding (only chunked is accepted)"};
  }
  return std::nullopt;
}

bool expects_continue(const BeastRequestParser& parser) {
  return boost::beast::iequals(parser.get()[http::field::expect], "100-continue");
}

HttpRequest release_request(BeastRequestParser& parser, std::string remote, bool& keep_alive) {
  http::request<http::string_body> msg = parser.release();
  HttpRequest request;
  request.method = std::string(msg.method_string());
  request.target = std::string(msg.target());
  size_t q = request.target.find('?');
  request.path = request.target.substr(0, q);
  if (q != std::string::npos) request.query = request.target.substr(q + 1);
  request.version = static_cast<int>(msg.version());
  request.remote = std::move(remote);
  for (const auto& field : msg) request.headers.add(std::string(field.name_string()), std::string(field.value()));
  request.body = std::move(msg.body());
  keep_alive = msg.keep_alive();
  return request;
}

std::optional<ReadRefusal> refusal_for_read_error(const boost::system::error_code& ec,
                                                  const HttpServerOptions& options) {
  if (ec == http::error::header_limit) {
    return ReadRefusal{431, "Request header fields too large (limit " + std::to_string(options.max_header_bytes) +
                                " bytes, --max-header-bytes)"};
  }
  if (ec == http::error::body_limit) {
    return ReadRefusal{413, "Request body too large (limit " + std::to_string(options.max_body_bytes) +
                                " bytes, --max-body-bytes)"};
  }
  // The client left, cleanly or mid-request: nobody to answer.
  if (ec == http::error::end_of_stream || ec == http::error::partial_message) return std::nullopt;
  if (ec.category() == http::make_error_code(http::error::bad_method).category()) {
    return ReadRefusal{400, "Malformed HTTP request: " + ec.message()};
  }
  return std::nullopt;
}

}  // namespace tern::server
