// Dispatcher with a recording Responder (no sockets): the order of checks
// (preflight, API key, routing) and the safety net for misbehaving handlers.
#include "server/http/dispatch.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "server/http/error.h"
#include "support/recording_responder.h"

namespace tern::server {
namespace {

RecordingResponder run(const Dispatcher& d, HttpRequest req) {
  RecordingResponder res;
  run_to_completion([&]() -> Task<> { co_await d.dispatch(req, res); });
  return res;
}

HttpRequest make(std::string method, std::string path) {
  HttpRequest r;
  r.method = std::move(method);
  r.path = std::move(path);
  return r;
}

Router test_router() {
  Router r;
  r.post("/v1/completions", [](HttpRequest& req, Responder& res) -> Task<> {
    co_await res.respond(200, "application/json", "{\"echo\":\"" + req.body + "\"}");
  });
  r.get("/health", [](HttpRequest&, Responder& res) -> Task<> { co_await res.respond(200, "text/plain", "ok"); });
  r.get("/throws", [](HttpRequest&, Responder&) -> Task<> {
    throw std::runtime_error("boom");
    co_return;
  });
  r.get("/silent", [](HttpRequest&, Responder&) -> Task<> { co_return; });
  return r;
}

TEST(Dispatcher, RoutesAndEchoesOrMakesRequestId) {
  Dispatcher d(test_router(), AuthOptions{}, CorsOptions{});
  HttpRequest req = make("POST", "/v1/completions");
  req.body = "x";
  req.headers.add("X-Request-Id", "client-id-1");
  RecordingResponder res = run(d, req);
  EXPECT_EQ(res.status, 200);
  EXPECT_EQ(res.body, "{\"echo\":\"x\"}");
  EXPECT_EQ(res.header("X-Request-Id"), "client-id-1");
  RecordingResponder gen = run(d, make("GET", "/health"));
  EXPECT_EQ(gen.header("X-Request-Id").size(), 32u);
}

TEST(Dispatcher, NotFoundAndMethodNotAllowedAreJson) {
  Dispatcher d(test_router(), AuthOptions{}, CorsOptions{});
  RecordingResponder nf = run(d, make("GET", "/nope"));
  EXPECT_EQ(nf.status, 404);
  EXPECT_EQ(nf.content_type, "application/json");
  EXPECT_NE(nf.body.find("\"code\":404"), std::string::npos);
  RecordingResponder na = run(d, make("GET", "/v1/completions"));
  EXPECT_EQ(na.status, 405);
  EXPECT_EQ(na.header("Allow"), "POST, OPTIONS");
  RecordingResponder opt = run(d, make("OPTIONS", "/v1/completions"));  // no Origin: not a preflight
  EXPECT_EQ(opt.status, 204);
  EXPECT_EQ(opt.header("Allow"), "POST, OPTIONS");
}

TEST(Dispatcher, ApiKeyBeforeRoutingButNotOnOpenPathsOrPreflight) {
  Dispatcher d(test_router(), AuthOptions{"sk-1", {"/health"}}, CorsOptions{});
  RecordingResponder no_key = run(d, make("POST", "/v1/completions"));
  EXPECT_EQ(no_key.status, 401);
  EXPECT_NE(no_key.body.find("\"error\":{\"message\""), std::string::npos);
  EXPECT_EQ(run(d, make("GET", "/unknown")).status, 401);  // unknown paths are not revealed
  EXPECT_EQ(run(d, make("GET", "/health")).status, 200);
  HttpRequest ok = make("POST", "/v1/completions");
  ok.headers.add("Authorization", "Bearer sk-1");
  EXPECT_EQ(run(d, ok).status, 200);
  HttpRequest pf = make("OPTIONS", "/v1/completions");
  pf.headers.add("Origin", "https://a.example");
  pf.headers.add("Access-Control-Request-Method", "POST");
  RecordingResponder pre = run(d, pf);
  EXPECT_EQ(pre.status, 200);
  EXPECT_EQ(pre.header("Access-Control-Allow-Origin"), "*");
}

TEST(Dispatcher, CorsHeadersOnActualResponses) {
  Dispatcher d(test_router(), AuthOptions{}, CorsOptions{{"https://a.example"}});
  HttpRequest req = make("GET", "/health");
  req.headers.add("Origin", "https://a.example");
  EXPECT_EQ(run(d, req).header("Access-Control-Allow-Origin"), "https://a.example");
  HttpRequest pf = make("OPTIONS", "/health");
  pf.headers.add("Origin", "https://evil.example");
  pf.headers.add("Access-Control-Request-Method", "GET");
  EXPECT_EQ(run(d, pf).status, 400);
}

TEST(Dispatcher, ErrorMessagesQuoteRequestTextAsBoundedAscii) {
  Dispatcher d(test_router(), AuthOptions{}, CorsOptions{});
  RecordingResponder nf = run(d, make("GET", "/\xff\xfe" + std::string(1000, 'a')));
  EXPECT_EQ(nf.status, 404);
  EXPECT_NE(nf.body.find("/??aaa"), std::string::npos);
  EXPECT_EQ(nf.body.find('\xff'), std::string::npos);
  EXPECT_LT(nf.body.size(), 400u);
}

TEST(Dispatcher, HandlerFailuresBecome500Json) {
  Dispatcher d(test_router(), AuthOptions{}, CorsOptions{});
  RecordingResponder thrown = run(d, make("GET", "/throws"));
  EXPECT_EQ(thrown.status, 500);
  EXPECT_NE(thrown.body.find("boom"), std::string::npos);
  EXPECT_EQ(run(d, make("GET", "/silent")).status, 500);
}

}  // namespace
}  // namespace tern::server
