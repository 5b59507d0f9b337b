// CORS decisions: preflight answers, disallowed origins, response headers.
#include "server/http/cors.h"

#include <gtest/gtest.h>

namespace tern::server {
namespace {

HttpRequest preflight(std::string origin, std::string method, std::string headers = "") {
  HttpRequest r;
  r.method = "OPTIONS";
  r.path = "/v1/chat/completions";
  r.headers.add("Origin", std::move(origin));
  r.headers.add("Access-Control-Request-Method", std::move(method));
  if (!headers.empty()) r.headers.add("Access-Control-Request-Headers", std::move(headers));
  return r;
}

std::string header(const std::vector<HttpHeader>& hs, std::string_view name) {
  for (const auto& h : hs) {
    if (iequals(h.name, name)) return h.value;
  }
  return "<absent>";
}

TEST(Cors, WildcardPreflightAllowsAnyOriginAndEchoesHeaders) {
  CorsPolicy cors(CorsOptions{});
  auto req = preflight("https://app.example", "POST", "authorization, content-type");
  ASSERT_TRUE(cors.is_preflight(req));
  CorsPreflight pf = cors.preflight(req);
  ASSERT_TRUE(pf.allowed);
  EXPECT_EQ(header(pf.headers, "Access-Control-Allow-Origin"), "*");
  EXPECT_NE(header(pf.headers, "Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(header(pf.headers, "Access-Control-Allow-Headers"), "authorization, content-type");
  EXPECT_EQ(header(pf.headers, "Access-Control-Max-Age"), "600");
}

TEST(Cors, ListedOriginIsEchoedOthersRefused) {
  CorsPolicy cors(CorsOptions{{"https://a.example"}});
  CorsPreflight ok = cors.preflight(preflight("https://a.example", "POST"));
  ASSERT_TRUE(ok.allowed);
  EXPECT_EQ(header(ok.headers, "Access-Control-Allow-Origin"), "https://a.example");
  EXPECT_EQ(header(ok.headers, "Vary"), "Origin");
  CorsPreflight bad = cors.preflight(preflight("https://evil.example", "POST"));
  EXPECT_FALSE(bad.allowed);
  EXPECT_NE(bad.reason.find("origin"), std::string::npos);
  EXPECT_TRUE(bad.headers.empty());
}

TEST(Cors, RestrictedMethodsAndHeaders) {
  CorsOptions o;
  o.allowed_methods = {"GET", "POST"};
  o.allowed_headers = {"Authorization"};
  CorsPolicy cors(o);
  EXPECT_TRUE(cors.preflight(preflight("https://x", "POST", "authorization, Content-Type")).allowed);
  EXPECT_FALSE(cors.preflight(preflight("https://x", "DELETE")).allowed);
  CorsPreflight bad = cors.preflight(preflight("https://x", "POST", "x-custom"));
  EXPECT_FALSE(bad.allowed);
  EXPECT_NE(bad.reason.find("headers"), std::string::npos);
  // Requested header names that are not tokens are refused, never echoed.
  EXPECT_FALSE(CorsPolicy(CorsOptions{}).preflight(preflight("https://x", "POST", "a b")).allowed);
}

TEST(Cors, NotAPreflight) {
  CorsPolicy cors(CorsOptions{});
  HttpRequest r = preflight("https://x", "POST");
  r.method = "POST";
  EXPECT_FALSE(cors.is_preflight(r));
  HttpRequest plain;
  plain.method = "OPTIONS";
  EXPECT_FALSE(cors.is_preflight(plain));
  CorsPolicy off(CorsOptions{{}});
  EXPECT_FALSE(off.enabled());
  EXPECT_FALSE(off.is_preflight(preflight("https://x", "POST")));
}

TEST(Cors, ResponseHeadersOnlyForAllowedOrigins) {
  HttpRequest r;
  r.method = "POST";
  EXPECT_TRUE(CorsPolicy(CorsOptions{}).response_headers(r).empty());  // no Origin
  r.headers.add("Origin", "https://a.example");
  auto any = CorsPolicy(CorsOptions{}).response_headers(r);
  EXPECT_EQ(header(any, "Access-Control-Allow-Origin"), "*");
  auto listed = CorsPolicy(CorsOptions{{"https://a.example"}}).response_headers(r);
  EXPECT_EQ(header(listed, "Access-Control-Allow-Origin"), "https://a.example");
  EXPECT_TRUE(CorsPolicy(CorsOptions{{"https://b.example"}}).response_headers(r).empty());
}

}  // namespace
}  // namespace tern::server
