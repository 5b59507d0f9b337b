// Hugging Face TGI's routes: POST /generate, POST /generate_stream, GET /info,
// with TGI's request and response shapes and its {"error", "error_type"}
// errors, served by the same engine as the OpenAI routes.
#pragma once

#include "server/router.h"
#include "server/serving_context.h"

namespace tern::server {

void add_tgi_routes(Router& router, ServingContext& ctx);

}  // namespace tern::server
