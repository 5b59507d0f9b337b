// The OpenAI- and vLLM-compatible routes: /v1/chat/completions,
// /v1/completions (streaming and not), /v1/models, /tokenize, /detokenize,
// /health, /ping, /version. Registered on a Router; every handler reads the
// shared ServingContext and talks to the engine only through EngineClient.
#pragma once

#include "server/api/serving_context.h"
#include "server/http/router.h"

namespace tern::server {

void add_openai_routes(Router& router, ServingContext& ctx);

// Sends an ApiError as an OpenAI-shaped JSON response (with Retry-After when set).
Task<void> respond_error(Responder& res, const struct ApiError& error);

}  // namespace tern::server
