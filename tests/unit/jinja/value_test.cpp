// Python's data model under the Jinja engine: str()/repr() of floats and
// strings, json.dumps spacing and escapes, key order from JSON, floor
// division and modulo signs, and the str methods on UTF-8 text.
#include "jinja/value.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "jinja/json.h"
#include "jinja/ops.h"
#include "jinja/text.h"

namespace tern::jinja {
namespace {

JinjaValue from(std::string_view json) { return jinja_from_json(nlohmann::ordered_json::parse(json)).value(); }

std::string dumps(std::string_view json, JsonDumpOptions o = {}) {
  auto r = json_dumps(from(json), o, 1 << 20);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? r.value() : "";
}

TEST(JinjaValue, FloatReprIsPythons) {
  EXPECT_EQ(py_float_repr(1.0), "1.0");
  EXPECT_EQ(py_float_repr(0.1), "0.1");
  EXPECT_EQ(py_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(py_float_repr(1e16), "1e+16");
  EXPECT_EQ(py_float_repr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(py_float_repr(0.0001), "0.0001");
  EXPECT_EQ(py_float_repr(0.00001), "1e-05");
  EXPECT_EQ(py_float_repr(-2.5e-10), "-2.5e-10");
  EXPECT_EQ(py_float_repr(5e-324), "5e-324");
  EXPECT_EQ(py_float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(py_float_repr(-0.0), "-0.0");
  EXPECT_EQ(py_float_repr(INFINITY), "inf");
  EXPECT_EQ(py_float_repr(NAN), "nan");
}

TEST(JinjaValue, StrReprChoosesQuotesAndEscapesLikePython) {
  EXPECT_EQ(py_repr_string("it's"), "\"it's\"");
  EXPECT_EQ(py_repr_string("say \"hi\""), "'say \"hi\"'");
  EXPECT_EQ(py_repr_string("both ' and \""), "'both \\' and \"'");
  EXPECT_EQ(py_repr_string("a\nb\tc\\"), "'a\\nb\\tc\\\\'");
  EXPECT_EQ(py_repr_string("\x01\x7f\u00a0\u2028é😀"), "'\\x01\\x7f\\xa0\\u2028é😀'");
  EXPECT_EQ(repr(from(R"({"a": [1, 2.5, null, true, "x"], "b": {}})")), "{'a': [1, 2.5, None, True, 'x'], 'b': {}}");
  EXPECT_EQ(to_str(JinjaValue::list({JinjaValue::integer(1)}, true)), "(1,)");
}

TEST(JinjaValue, JsonDumpsMatchesPython) {
  EXPECT_EQ(dumps(R"({"b": [1, 2.0, null], "a": "é\n\"\\", "c": {}})"),
            R"({"b": [1, 2.0, null], "a": "é\n\"\\", "c": {}})");
  JsonDumpOptions indent;
  indent.indent = "  ";
  EXPECT_EQ(dumps(R"({"a": [1, {"b": []}]})", indent), "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ]\n}");
  JsonDumpOptions sorted;
  sorted.sort_keys = true;
  sorted.separators = std::make_pair(std::string(","), std::string(":"));
  EXPECT_EQ(dumps(R"({"b": 1, "a": 2})", sorted), R"({"a":2,"b":1})");
  JsonDumpOptions ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(dumps(R"("é😀\u0001\u007f")", ascii), R"("\u00e9\ud83d\ude00\u0001\u007f")");
  EXPECT_EQ(dumps(R"("\u0001\u001f\u007f\u2028")"), "\"\\u0001\\u001f\x7f\u2028\"");
  EXPECT_EQ(dumps("[1e-07, 1e+16, 123456.789, -0.0]"), "[1e-07, 1e+16, 123456.789, -0.0]");
  EXPECT_FALSE(json_dumps(JinjaValue::undefined(), {}, 100).is_ok());
}

TEST(JinjaValue, JsonObjectsKeepTheirKeyOrder) {
  JinjaValue v = from(R"({"zeta": 1, "alpha": 2, "mid": 3})");
  ASSERT_TRUE(v.is_dict());
  std::string keys;
  for (const auto& [k, val] : v.as_dict().items()) keys += k.as_string() + ",";
  EXPECT_EQ(keys, "zeta,alpha,mid,");
  // Big dicts switch to a hash index without changing order or lookups.
  JinjaDict d;
  for (int i = 0; i < 100; ++i) d.set(std::to_string(99 - i), JinjaValue::integer(i));
  d.set(std::string("50"), JinjaValue::integer(-1));
  EXPECT_EQ(d.size(), 100u);
  EXPECT_EQ(d.items().front().first.as_string(), "99");
  EXPECT_EQ(d.find(std::string_view("50"))->as_int(), -1);
  EXPECT_EQ(d.find(JinjaValue::string("7"))->as_int(), 92);
  EXPECT_EQ(d.find(std::string_view("x")), nullptr);
}

TEST(JinjaValue, ArithmeticFollowsPython) {
  auto op = [](BinaryOp o, JinjaValue a, JinjaValue b) { return repr(binary_op(o, a, b, 1 << 20).value()); };
  using V = JinjaValue;
  EXPECT_EQ(op(BinaryOp::kFloorDiv, V::integer(-7), V::integer(2)), "-4");
  EXPECT_EQ(op(BinaryOp::kMod, V::integer(-7), V::integer(3)), "2");
  EXPECT_EQ(op(BinaryOp::kMod, V::integer(7), V::integer(-3)), "-2");
  EXPECT_EQ(op(BinaryOp::kMod, V::number(-5.5), V::integer(2)), "0.5");
  EXPECT_EQ(op(BinaryOp::kFloorDiv, V::number(7.5), V::integer(2)), "3.0");
  EXPECT_EQ(op(BinaryOp::kDiv, V::integer(4), V::integer(2)), "2.0");
  EXPECT_EQ(op(BinaryOp::kPow, V::integer(2), V::integer(-1)), "0.5");
  EXPECT_EQ(op(BinaryOp::kAdd, V::boolean(true), V::integer(1)), "2");
  EXPECT_EQ(op(BinaryOp::kMul, V::string("ab"), V::integer(-1)), "''");
  EXPECT_FALSE(binary_op(BinaryOp::kAdd, V::string("a"), V::integer(1), 100).is_ok());
  EXPECT_FALSE(binary_op(BinaryOp::kMod, V::integer(1), V::integer(0), 100).is_ok());
  EXPECT_TRUE(py_equal(V::integer(1), V::number(1.0)));
  EXPECT_TRUE(py_equal(from(R"({"a": 1, "b": 2})"), from(R"({"b": 2, "a": 1})")));
  EXPECT_FALSE(py_equal(V::list({V::integer(1)}), V::list({V::integer(1)}, true)));
  EXPECT_FALSE(py_compare(V::integer(1), V::string("a"), "<").is_ok());
}

TEST(JinjaValue, StrMethodsOnUtf8) {
  EXPECT_EQ(utf8_length("héllo😀"), 6u);
  EXPECT_EQ(py_strip("\u3000 a b\u00a0\n", std::nullopt, true, true), "a b");
  EXPECT_EQ(py_strip("xxaxx", std::string("x"), true, false), "axx");
  EXPECT_EQ(py_split(" a  b\u2003c ", std::nullopt, -1), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(py_split(" a b c ", std::nullopt, 1), (std::vector<std::string>{"a", "b c "}));
  EXPECT_EQ(py_rsplit("a-b-c", std::string("-"), 1), (std::vector<std::string>{"a-b", "c"}));
  EXPECT_EQ(py_splitlines("a\r\nb\u2028c\n", false), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(py_upper("straße ÿ é"), "STRASSE Ÿ É");
  EXPECT_EQ(py_lower("ÉCOLE ΣΑ"), "école σα");
  EXPECT_EQ(py_title("they're bill's 1st"), "They'Re Bill'S 1St");
  EXPECT_EQ(jinja_title("they're bill's (x-y)"), "They're Bill's (X-Y)");
  EXPECT_EQ(py_capitalize("hELLO"), "Hello");
  EXPECT_EQ(py_replace("aXbX", "X", "-", 1, 100).value(), "a-bX");
  EXPECT_EQ(py_replace("ab", "", "-", -1, 100).value(), "-a-b-");
  EXPECT_FALSE(py_replace("ab", "", "xyz", -1, 5).has_value());
  // Invalid UTF-8 survives decoding and encoding unchanged.
  EXPECT_EQ(encode_utf8(decode_utf8("a\xff\xc3")), "a\xff\xc3");
}

}  // namespace
}  // namespace tern::jinja
