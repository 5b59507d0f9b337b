// Router: exact paths per method, 404 vs 405 with Allow, HEAD -> GET.
#include "server/http/router.h"

#include <gtest/gtest.h>

namespace tern::server {
namespace {

Handler noop() {
  return [](HttpRequest&, Responder&) -> Task<> { co_return; };
}

TEST(Router, FindsExactPathAndMethod) {
  Router r;
  r.get("/v1/models", noop());
  r.post("/v1/completions", noop());
  auto m = r.find("GET", "/v1/models");
  EXPECT_NE(m.handler, nullptr);
  EXPECT_TRUE(m.path_known);
  EXPECT_NE(r.find("POST", "/v1/completions").handler, nullptr);
}

TEST(Router, UnknownPathIs404) {
  Router r;
  r.get("/v1/models", noop());
  for (const char* p : {"/v1/models/", "/v1/model", "/V1/models", "", "/"}) {
    auto m = r.find("GET", p);
    EXPECT_EQ(m.handler, nullptr) << p;
    EXPECT_FALSE(m.path_known) << p;
  }
}

TEST(Router, WrongMethodIs405WithAllow) {
  Router r;
  r.get("/tokenize", noop());
  r.post("/tokenize", noop());
  r.post("/v1/completions", noop());
  auto m = r.find("DELETE", "/v1/completions");
  EXPECT_EQ(m.handler, nullptr);
  EXPECT_TRUE(m.path_known);
  EXPECT_EQ(m.allow, "POST, OPTIONS");
  EXPECT_EQ(r.find("PUT", "/tokenize").allow, "GET, POST, OPTIONS");
  EXPECT_EQ(r.find("get", "/tokenize").handler, nullptr);  // methods are case-sensitive
}

TEST(Router, HeadFallsBackToGet) {
  Router r;
  r.get("/health", noop());
  r.post("/generate", noop());
  EXPECT_NE(r.find("HEAD", "/health").handler, nullptr);
  EXPECT_EQ(r.find("HEAD", "/generate").handler, nullptr);
}

TEST(Router, AddReplacesSameMethod) {
  Router r;
  int which = 0;
  r.get("/x", [&which](HttpRequest&, Responder&) -> Task<> {
    which = 1;
    co_return;
  });
  r.get("/x", noop());
  EXPECT_EQ(r.paths(), std::vector<std::string>{"/x"});
  EXPECT_EQ(r.allowed_methods("/x"), "GET, OPTIONS");
  EXPECT_EQ(which, 0);
}

}  // namespace
}  // namespace tern::server
