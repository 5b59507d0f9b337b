// The chat page and its files, /metrics and /openapi.json. The page's files
// are embedded in the binary (web_assets.h) and served with an ETag; a
// browser revalidates them (Cache-Control: no-cache) and gets 304 while
// they are unchanged.
#include "server/api/web_routes.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/api/metrics.h"
#include "server/api/openapi_spec.h"
#include "server/api/web_assets.h"
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

// True if the If-None-Match header names `etag` (or is "*").
bool matches_etag(const HttpRequest& req, std::string_view etag) {
  auto header = req.headers.get("if-none-match");
  if (!header) return false;
  std::string_view list = *header;
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item.starts_with("W/")) item.remove_prefix(2);
    if (item == etag || item == "*") return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

// Every argument of respond() is a named local: g++ 12 double-frees temporaries built inside co_await's arguments.
Handler embedded_file_handler(const WebAsset& asset) {
  return [&asset](HttpRequest& req, Responder& res) -> Task<void> {
    std::vector<HttpHeader> headers = {{"ETag", std::string(asset.etag)}, {"Cache-Control", "no-cache"},
                                       {"X-Content-Type-Options", "nosniff"}};
    std::string content_type(asset.content_type);
    if (matches_etag(req, asset.etag)) {
      std::string no_body;
      co_await res.respond(304, std::move(content_type), std::move(no_body), std::move(headers));
      co_return;
    }
    std::string body(asset.body);
    co_await res.respond(200, std::move(content_type), std::move(body), std::move(headers));
  };
}

// --web-root: the page's own files read from disk at every request (for work on the page), no caching.
Handler disk_file_handler(const WebAsset& asset, std::filesystem::path file) {
  return [&asset, file = std::move(file)](HttpRequest&, Responder& res) -> Task<void> {
    std::string body = read_file(file);
    std::string content_type(asset.content_type);
    if (body.empty()) {
      std::string json_type(kJsonContentType);
      std::string error = openai_error_body(404, "--web-root has no " + file.string());
      co_await res.respond(404, std::move(json_type), std::move(error));
      co_return;
    }
    std::vector<HttpHeader> headers = {{"Cache-Control", "no-store"}};
    co_await res.respond(200, std::move(content_type), std::move(body), std::move(headers));
  };
}

}  // namespace

std::vector<std::string> add_web_routes(Router& router, ServingContext& ctx, std::shared_ptr<HttpCounters> counters,
                                        const WebPageOptions& page) {
  std::vector<std::string> page_paths;
  if (page.enabled) {
    for (const WebAsset& asset : web_assets()) {
      constexpr std::string_view kPageFolder = "web/";
      if (!page.web_root.empty() && asset.source.starts_with(kPageFolder)) {
        std::filesystem::path file = std::filesystem::path(page.web_root) / asset.source.substr(kPageFolder.size());
        router.get(std::string(asset.path), disk_file_handler(asset, std::move(file)));
      } else {
        router.get(std::string(asset.path), embedded_file_handler(asset));
      }
      page_paths.emplace_back(asset.path);
    }
  } else {
    router.get("/", [](HttpRequest&, Responder& res) -> Task<void> {
      std::string json_type(kJsonContentType);
      std::string error = openai_error_body(404, "the chat page is turned off (tern serve --no-webui)");
      co_await res.respond(404, std::move(json_type), std::move(error));
    });
  }
  router.get("/metrics", [&ctx, counters](HttpRequest&, Responder& res) -> Task<void> {
    std::string body = ctx.metrics->render(ctx.engine->stats(), *counters);
    co_await res.respond(200, "text/plain; version=0.0.4; charset=utf-8", std::move(body));
  });
  router.get("/openapi.json", [&ctx](HttpRequest&, Responder& res) -> Task<void> {
    co_await res.respond(200, std::string(kJsonContentType), openapi_spec(ctx.model_name, ctx.limits));
  });
  return page_paths;
}

}  // namespace tern::server
