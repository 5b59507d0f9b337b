// Hugging Face TGI's routes: POST /generate, POST /generate_stream, GET /info,
// with TGI's request and response shapes and its {"error", "error_type"}
// errors, served by the same engine as the OpenAI routes.
#pragma once

#include "server/api/serving_context.h"
#include "server/http/router.h"

namespace tern::server {

void add_tgi_routes(Router& router, ServingContext& ctx);

}  // namespace tern::server
