// Request helpers: header lookup, query decoding, request ids, response heads.
#include <gtest/gtest.h>

#include "server/http/error.h"
#include "server/http/request.h"
#include "server/http/response_head.h"

namespace tern::server {
namespace {

TEST(HttpHeaders, CaseInsensitiveFirstMatch) {
  HttpHeaders h;
  h.add("Content-Type", "application/json");
  h.add("X-A", "1");
  h.add("x-a", "2");
  EXPECT_EQ(h.get("content-type").value_or(""), "application/json");
  EXPECT_EQ(h.get("X-A").value_or(""), "1");
  EXPECT_FALSE(h.get("content-length").has_value());
}

TEST(Query, DecodesPercentAndPlus) {
  HttpRequest r;
  r.query = "n=5&text=a%20b+c&bad=%zz%4&empty=&flag";
  EXPECT_EQ(r.query_param("n").value_or(""), "5");
  EXPECT_EQ(r.query_param("text").value_or(""), "a b c");
  EXPECT_EQ(r.query_param("bad").value_or(""), "%zz%4");
  EXPECT_EQ(r.query_param("empty").value_or("x"), "");
  EXPECT_EQ(r.query_param("flag").value_or("x"), "");
  EXPECT_FALSE(r.query_param("missing").has_value());
}

TEST(RequestId, ClientIdsAreCheckedAndGeneratedOnesUnique) {
  EXPECT_TRUE(is_usable_request_id("abc-123"));
  EXPECT_FALSE(is_usable_request_id(""));
  EXPECT_FALSE(is_usable_request_id("has space"));
  EXPECT_FALSE(is_usable_request_id(std::string(129, 'a')));
  std::string a = make_request_id();
  std::string b = make_request_id();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_TRUE(is_usable_request_id(a));
}

TEST(ResponseHead, FramingAndInjectedHeadersDropped) {
  ResponseFraming f{std::optional<uint64_t>(5), false, true, 11};
  std::vector<HttpHeader> extra{{"X-Ok", "1"},
                                {"X-Bad", "a\r\nSet-Cookie: x"},
                                {"Bad Name", "v"},
                                {"Content-Length", "999"},
                                {"Connection", "upgrade"}};
  std::string head = response_head(200, "text/plain", f, {{"X-Request-Id", "r1"}}, extra);
  EXPECT_EQ(head,
            "HTTP/1.1 200 OK\r\nServer: tern\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
            "X-Request-Id: r1\r\nX-Ok: 1\r\n\r\n");
}

TEST(ResponseHead, ChunkedCloseAndHttp10KeepAlive) {
  std::string chunked = response_head(200, "text/event-stream", {std::nullopt, true, false, 11}, {}, {});
  EXPECT_NE(chunked.find("Transfer-Encoding: chunked\r\n"), std::string::npos);
  EXPECT_NE(chunked.find("Connection: close\r\n"), std::string::npos);
  EXPECT_EQ(chunked.find("Content-Length"), std::string::npos);
  std::string v10 = response_head(200, "a/b", {std::optional<uint64_t>(0), false, true, 10}, {}, {});
  EXPECT_NE(v10.find("Connection: keep-alive\r\n"), std::string::npos);
  std::string no_content = response_head(204, "", {std::optional<uint64_t>(0), false, true, 11}, {}, {});
  EXPECT_EQ(no_content.find("Content-Length"), std::string::npos);
}

TEST(ResponseHead, ChunkSizeLineIsHex) {
  EXPECT_EQ(chunk_size_line(0), "0\r\n");
  EXPECT_EQ(chunk_size_line(10), "a\r\n");
  EXPECT_EQ(chunk_size_line(4096), "1000\r\n");
}

TEST(ErrorBody, OpenAiShape) {
  EXPECT_EQ(openai_error_body(404, "Not \"here\""),
            "{\"error\":{\"message\":\"Not \\\"here\\\"\",\"type\":\"NotFoundError\",\"param\":null,\"code\":404}}");
  EXPECT_EQ(openai_error_body(400, "bad", "invalid_request_error", "temperature"),
            "{\"error\":{\"message\":\"bad\",\"type\":\"invalid_request_error\",\"param\":\"temperature\",\"code\":400}}");
  EXPECT_EQ(http_reason(431), "Request Header Fields Too Large");
}

}  // namespace
}  // namespace tern::server
