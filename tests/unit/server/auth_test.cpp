// API key checks: constant-time compare, Bearer parsing, open paths.
#include "server/http/auth.h"

#include <gtest/gtest.h>

namespace tern::server {
namespace {

TEST(ConstantTimeEqual, EqualityOnly) {
  EXPECT_TRUE(constant_time_equal("secret", "secret"));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal("secreT", "secret"));
  EXPECT_FALSE(constant_time_equal("secret1", "secret"));  // longer, same prefix
  EXPECT_FALSE(constant_time_equal("secre", "secret"));    // shorter, same prefix
  EXPECT_FALSE(constant_time_equal("", "secret"));
  EXPECT_FALSE(constant_time_equal("x", ""));
  EXPECT_FALSE(constant_time_equal(std::string("secret\0", 7), "secret"));
}

TEST(BearerToken, ParsesSchemeCaseInsensitively) {
  EXPECT_EQ(bearer_token("Bearer abc"), "abc");
  EXPECT_EQ(bearer_token("bearer   abc  "), "abc");
  EXPECT_EQ(bearer_token("BEARER\tabc"), "abc");
  EXPECT_EQ(bearer_token("Basic abc"), "");
  EXPECT_EQ(bearer_token("Bearerabc"), "");
  EXPECT_EQ(bearer_token("Bearer"), "");
  EXPECT_EQ(bearer_token(""), "");
}

HttpRequest request(std::string path, std::string authorization = "", std::string method = "POST") {
  HttpRequest r;
  r.method = std::move(method);
  r.path = std::move(path);
  if (!authorization.empty()) r.headers.add("Authorization", std::move(authorization));
  return r;
}

TEST(ApiKeyAuth, DisabledWithoutKey) {
  ApiKeyAuth auth(AuthOptions{});
  EXPECT_FALSE(auth.enabled());
  EXPECT_TRUE(auth.allows(request("/v1/completions")));
}

TEST(ApiKeyAuth, RequiresKeyExceptOnOpenPaths) {
  ApiKeyAuth auth(AuthOptions{"k3y", {"/health", "/metrics"}});
  EXPECT_FALSE(auth.allows(request("/v1/completions")));
  EXPECT_FALSE(auth.allows(request("/v1/completions", "Bearer wrong")));
  EXPECT_FALSE(auth.allows(request("/v1/completions", "k3y")));
  EXPECT_FALSE(auth.allows(request("/v1/completions", "Basic k3y")));
  EXPECT_TRUE(auth.allows(request("/v1/completions", "Bearer k3y")));
  EXPECT_TRUE(auth.allows(request("/health", "", "GET")));
  EXPECT_TRUE(auth.allows(request("/metrics", "", "HEAD")));
  EXPECT_FALSE(auth.allows(request("/health/", "", "GET")));  // exact paths only
  // Open paths are open to reads: a POST (TGI's generate on /) still needs the key.
  EXPECT_FALSE(auth.allows(request("/health")));
  EXPECT_TRUE(auth.allows(request("/health", "Bearer k3y")));
}

TEST(ApiKeyAuth, HeaderNameIsCaseInsensitive) {
  ApiKeyAuth auth(AuthOptions{"k", {}});
  HttpRequest r = request("/x");
  r.headers.add("authorization", "Bearer k");
  EXPECT_TRUE(auth.allows(r));
}

}  // namespace
}  // namespace tern::server
