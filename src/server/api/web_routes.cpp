// The chat page, /metrics and /openapi.json.
#include "server/api/web_routes.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/api/metrics.h"
#include "server/api/openapi_spec.h"
#include "server/http/error.h"

namespace tern::server {
namespace {

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* kPlaceholderPage = R"(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tern</title></head>
<body><h1>tern</h1><p>The OpenAI-compatible API is at <code>/v1/chat/completions</code>;
the specification at <a href="/openapi.json">/openapi.json</a>; metrics at <a href="/metrics">/metrics</a>.</p>
</body></html>
)";

}  // namespace

void add_web_routes(Router& router, ServingContext& ctx, std::shared_ptr<HttpCounters> counters,
                    const std::string& web_root) {
  std::filesystem::path root = web_root.empty() ? std::filesystem::path(TERN_SOURCE_WEB_DIR) : std::filesystem::path(web_root);
  router.get("/", [root](HttpRequest&, Responder& res) -> Task<void> {
    std::string page = read_file(root / "index.html");
    if (page.empty()) page = kPlaceholderPage;
    // A named body: g++ 12 double-frees a temporary built inside co_await's arguments.
    std::string content_type = "text/html; charset=utf-8";
    co_await res.respond(200, std::move(content_type), std::move(page));
  });
  router.get("/metrics", [&ctx, counters](HttpRequest&, Responder& res) -> Task<void> {
    std::string body = ctx.metrics->render(ctx.engine->stats(), *counters);
    co_await res.respond(200, "text/plain; version=0.0.4; charset=utf-8", std::move(body));
  });
  router.get("/openapi.json", [&ctx](HttpRequest&, Responder& res) -> Task<void> {
    co_await res.respond(200, std::string(kJsonContentType), openapi_spec(ctx.model_name));
  });
}

}  // namespace tern::server
