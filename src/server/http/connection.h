// Internal to the transport: starting a connection's session (the only code
// that sees Beast lives in connection.cpp).
#pragma once

#include <utility>  // before Asio: Boost 1.74 + g++ 12 need it

#include <boost/asio/ip/tcp.hpp>
#include <memory>

#include "server/http/server_context.h"

namespace tern::server {

// Serves HTTP/1.1 requests on `socket` (whose executor must be a strand)
// until the client leaves, a limit or timeout closes it, or the server shuts
// down. Registers with `ctx` for shutdown.
void start_connection(boost::asio::ip::tcp::socket socket, std::shared_ptr<ServerContext> ctx);

// Answers 503 (too many connections) without reading the request, then closes.
void reject_connection(boost::asio::ip::tcp::socket socket, std::shared_ptr<ServerContext> ctx);

}  // namespace tern::server
