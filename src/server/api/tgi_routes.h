// Hugging Face TGI's routes: POST /generate, POST /generate_stream, GET /info,
// with TGI's request and response shapes and its {"error", "error_type"}
// errors, served by the same engine as the OpenAI routes.
#pragma once

#include <string>
#include <string_view>

#include "engine/request.h"
#include "server/api/serving_context.h"
#include "server/http/router.h"

namespace tern::server {

void add_tgi_routes(Router& router, ServingContext& ctx);

// A request body validated as /generate (or, with `compat_route`, POST /, which
// also reads "stream") validates it, without running it: for tests and the fuzzer.
struct TgiValidation {
  int status = 200;        // the error response's status; 200 when accepted
  std::string error_body;  // TGI's {"error", "error_type"} when refused
  Request request;         // the engine request when accepted
};
TgiValidation validate_tgi_request(std::string_view body, const ServingContext& ctx, bool compat_route);

}  // namespace tern::server
