// SSE framing and JSON escaping: what streaming clients parse.
#include "server/http/sse.h"

#include <gtest/gtest.h>

#include "server/http/json_escape.h"

namespace tern::server {
namespace {

TEST(Sse, EventIsDataLineAndBlankLine) {
  EXPECT_EQ(sse_event("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
}

TEST(Sse, MultiLinePayloadBecomesOneDataLinePerLine) {
  EXPECT_EQ(sse_event("a\nb"), "data: a\ndata: b\n\n");
  EXPECT_EQ(sse_event("a\r\nb\rc"), "data: a\ndata: b\ndata: c\n\n");
  EXPECT_EQ(sse_event("a\n"), "data: a\ndata: \n\n");
}

TEST(Sse, AppendKeepsExistingBytes) {
  std::string out = "x";
  append_sse_event(out, "1");
  append_sse_event(out, "2");
  EXPECT_EQ(out, "xdata: 1\n\ndata: 2\n\n");
}

TEST(Sse, ChunkTemplateEscapesOnlyTheText) {
  SseChunkTemplate t("{\"delta\":{\"content\":\"", "\"}}");
  EXPECT_EQ(t.format("hi"), "data: {\"delta\":{\"content\":\"hi\"}}\n\n");
  EXPECT_EQ(t.format("a\"b\\c\nd"), "data: {\"delta\":{\"content\":\"a\\\"b\\\\c\\nd\"}}\n\n");
  EXPECT_EQ(t.format("你好"), "data: {\"delta\":{\"content\":\"你好\"}}\n\n");
  EXPECT_EQ(t.format(""), "data: {\"delta\":{\"content\":\"\"}}\n\n");
}

TEST(JsonEscape, ControlCharactersAndPassThrough) {
  std::string out;
  append_json_escaped(out, std::string_view("\x01\x1f\t\b\f\r", 6));
  EXPECT_EQ(out, "\\u0001\\u001f\\t\\b\\f\\r");
  EXPECT_EQ(json_quote("é/<>"), "\"é/<>\"");
  std::string nul("a\0b", 3);
  EXPECT_EQ(json_quote(nul), "\"a\\u0000b\"");
}

// U+0085, U+2028 and U+2029 are legal raw in JSON, but line readers split on
// them, which would cut an SSE event in two.
TEST(JsonEscape, UnicodeLineBreaksAreEscaped) {
  EXPECT_EQ(json_quote("a\u2028b\u2029c\u0085d"), "\"a\\u2028b\\u2029c\\u0085d\"");
  // Their neighbours in UTF-8 pass as they are, and so do truncated lead bytes.
  EXPECT_EQ(json_quote("\u2027\u202a\u0084\u00e9"), "\"\u2027\u202a\u0084\u00e9\"");
  EXPECT_EQ(json_quote(std::string_view("\xe2\x80", 2)), std::string("\"\xe2\x80\"", 4));
  EXPECT_EQ(json_quote(std::string_view("\xc2", 1)), std::string("\"\xc2\"", 3));
  SseChunkTemplate t("{\"t\":\"", "\"}");
  EXPECT_EQ(t.format("x\u2028y"), "data: {\"t\":\"x\\u2028y\"}\n\n");

  std::string json = "{\"a\":\"\u2028\",\"b\":\"\u00e9\u0085\u2029\"}";
  escape_unicode_line_breaks(json);
  EXPECT_EQ(json, "{\"a\":\"\\u2028\",\"b\":\"\u00e9\\u0085\\u2029\"}");
  std::string plain = "{\"a\":\"你好\"}";
  escape_unicode_line_breaks(plain);
  EXPECT_EQ(plain, "{\"a\":\"你好\"}");
}

}  // namespace
}  // namespace tern::server
