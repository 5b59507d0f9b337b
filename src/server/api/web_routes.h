// Routes for people and operators: GET / (the built-in chat page) and its
// files under /web/, GET /metrics (Prometheus text), GET /openapi.json (the
// machine-readable spec of every route).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/api/serving_context.h"
#include "server/http/counters.h"
#include "server/http/router.h"

namespace tern::server {

struct WebPageOptions {
  bool enabled = true;   // false (--no-webui): GET / answers 404 and no /web/ file is served
  std::string web_root;  // "" serves the files embedded at build time; a folder serves its web/ files from disk
};

// Registers the routes; returns the paths of the chat page and its files,
// which a browser loads without the API key (empty when the page is off).
std::vector<std::string> add_web_routes(Router& router, ServingContext& ctx, std::shared_ptr<HttpCounters> counters,
                                        const WebPageOptions& page);

}  // namespace tern::server
