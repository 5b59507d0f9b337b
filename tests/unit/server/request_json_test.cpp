// Request bodies as JSON: nesting is bounded before parsing (brackets inside
// strings do not count), syntax errors name their byte, values come back whole.
#include "server/api/request_json.h"

#include <gtest/gtest.h>

#include <string>

namespace tern::server {
namespace {

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonDepth, CountsOnlyBracketsOutsideStrings) {
  EXPECT_EQ(json_depth_exceeded_at(nested(64), 64), std::string_view::npos);
  EXPECT_EQ(json_depth_exceeded_at(nested(65), 64), 64u);
  EXPECT_EQ(json_depth_exceeded_at(R"({"a": "[[[[[[", "b": [1]})", 2), std::string_view::npos);
  EXPECT_EQ(json_depth_exceeded_at(R"({"a": "\"[[[", "b": [[1]]})", 2), 21u);
  // Closers without openers do not buy depth.
  EXPECT_EQ(json_depth_exceeded_at("]]]]" + nested(3), 2), 6u);
}

TEST(ParseRequestJson, RefusesDeepNestingBeforeParsing) {
  auto r = parse_request_json(R"({"messages": )" + nested(2000000) + "}");
  ASSERT_TRUE(std::holds_alternative<std::string>(r));
  EXPECT_NE(std::get<std::string>(r).find("nests deeper than 64"), std::string::npos) << std::get<std::string>(r);
}

TEST(ParseRequestJson, SyntaxErrorsNameTheByte) {
  auto r = parse_request_json(R"({"prompt": "x",})");
  ASSERT_TRUE(std::holds_alternative<std::string>(r));
  const std::string& m = std::get<std::string>(r);
  EXPECT_EQ(m.rfind("the request body is not valid JSON: ", 0), 0u) << m;
  EXPECT_NE(m.find("(at byte 15)"), std::string::npos) << m;

  auto empty = parse_request_json("");
  ASSERT_TRUE(std::holds_alternative<std::string>(empty));
  EXPECT_NE(std::get<std::string>(empty).find("empty"), std::string::npos);

  auto utf8 = parse_request_json("{\"prompt\": \"a\xff\"}");
  ASSERT_TRUE(std::holds_alternative<std::string>(utf8));
  EXPECT_NE(std::get<std::string>(utf8).find("UTF-8"), std::string::npos) << std::get<std::string>(utf8);
}

TEST(ParseRequestJson, ValidBodiesComeBackWhole) {
  auto r = parse_request_json(R"({"prompt": "[[[", "n": 2, "stop": ["\"]"]})");
  ASSERT_TRUE(std::holds_alternative<nlohmann::json>(r));
  const auto& j = std::get<nlohmann::json>(r);
  EXPECT_EQ(j["prompt"], "[[[");
  EXPECT_EQ(j["n"], 2);
  EXPECT_EQ(j["stop"][0], "\"]");
  EXPECT_TRUE(std::holds_alternative<nlohmann::json>(parse_request_json(nested(64))));
}

}  // namespace
}  // namespace tern::server
