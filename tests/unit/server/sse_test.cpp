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

}  // namespace
}  // namespace tern::server
