// The steps of reading one request that do not touch the socket: Beast's
// parser set up with the server's limits, the framing check after the header,
// the conversion to a Beast-free HttpRequest, and the answer to a read error.
// Transport-internal (it exposes Beast): Connection runs them around its socket
// reads, and the HTTP fuzzer (tests/fuzz/fuzz_http_request.cpp) runs the same
// steps over bytes in memory.
#pragma once

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/system/error_code.hpp>
#include <optional>
#include <string>

#include "server/http/request.h"

namespace tern::server {

struct HttpServerOptions;

using BeastRequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// The answer a connection sends before it closes: `status` with `message`.
struct ReadRefusal {
  int status = 400;
  std::string message;
};

// Applies the header and body limits of `options` to a fresh parser.
void apply_limits(BeastRequestParser& parser, const HttpServerOptions& options);

// After the header: a body framed by anything but chunked cannot be delimited
// (RFC 9112 6.3), so it is refused rather than guessed at.
std::optional<ReadRefusal> check_framing(const BeastRequestParser& parser);

// True when the header asks for "100 Continue" before the body is sent.
bool expects_continue(const BeastRequestParser& parser);

// Moves the parsed message out of `parser` (whose header and body are done).
HttpRequest release_request(BeastRequestParser& parser, std::string remote, bool& keep_alive);

// What a failed read answers: 431, 413 or 400 with the reason, or nothing when
// the client left (end of stream, partial message) or the error is not the parser's.
std::optional<ReadRefusal> refusal_for_read_error(const boost::system::error_code& ec,
                                                  const HttpServerOptions& options);

}  // namespace tern::server
