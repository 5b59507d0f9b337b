// Routes for people and operators: GET / (the built-in chat page), GET
// /metrics (Prometheus text), GET /openapi.json (the machine-readable spec of
// every route).
#pragma once

#include <memory>
#include <string>

#include "server/api/serving_context.h"
#include "server/http/counters.h"
#include "server/http/router.h"

namespace tern::server {

// `web_root`: folder holding index.html and its assets ("" = the web/ folder
// of the source tree tern was built from).
void add_web_routes(Router& router, ServingContext& ctx, std::shared_ptr<HttpCounters> counters,
                    const std::string& web_root);

}  // namespace tern::server
