// Internal to the transport: the OpenSSL context of an HTTPS server, built
// once from --ssl-certfile/--ssl-keyfile (and --ssl-ca-certs for client
// certificates) before the server listens. Read-only afterwards, shared by
// every connection's TLS stream.
#pragma once

#include <utility>  // before Asio: Boost 1.74 + g++ 12 need it

#include <boost/asio/ssl/context.hpp>
#include <memory>

#include "base/status.h"
#include "server/http/server.h"

namespace tern::server {

// Loads the certificate chain and its private key (PEM), checks that they
// belong together, and sets up client-certificate checks. Every error names
// the flag and the file it is about.
Result<std::shared_ptr<boost::asio::ssl::context>> make_tls_context(const TlsOptions& options);

}  // namespace tern::server
