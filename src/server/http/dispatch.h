// Dispatcher: everything between a parsed request and its route, with no
// Beast types: request id, CORS preflight and headers, the API key, routing
// (404 / 405 JSON), and a safety net (500 JSON when a handler throws or
// returns without answering; the transport ends a stream left open).
// Immutable after construction; io threads share it.
#pragma once

#include "server/http/auth.h"
#include "server/http/cors.h"
#include "server/http/router.h"

namespace tern::server {

class Dispatcher {
 public:
  Dispatcher(Router router, AuthOptions auth, CorsOptions cors);
  Task<void> dispatch(HttpRequest& request, Responder& responder) const;

  const Router& router() const { return router_; }

 private:
  Router router_;
  ApiKeyAuth auth_;
  CorsPolicy cors_;
};

}  // namespace tern::server
