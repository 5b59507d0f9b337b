// Chat templates are untrusted input (model files, --chat-template, and the
// messages of HTTP clients): every failure is a Status naming line and
// column, and hostile templates end with an error within bounded time,
// memory and stack instead of crashing or hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "jinja/json.h"
#include "jinja/template.h"

namespace tern {
namespace {

Status compile_error(std::string_view source) {
  auto t = JinjaTemplate::compile(source);
  EXPECT_FALSE(t.is_ok()) << "compiled: " << source;
  return t.is_ok() ? Status::ok() : t.status();
}

Status render_error(std::string_view source, std::string_view context_json = "{}", const JinjaLimits& limits = {}) {
  auto t = JinjaTemplate::compile(source);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  if (!t.is_ok()) return t.status();
  auto ctx = jinja_from_json(nlohmann::ordered_json::parse(context_json));
  auto out = t->render(ctx.value(), limits);
  EXPECT_FALSE(out.is_ok()) << "rendered " << out.value().size() << " bytes: " << source;
  return out.is_ok() ? Status::ok() : out.status();
}

void expect_message(const Status& s, ErrorCode code, std::string_view text) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(text), std::string::npos) << s.to_string();
}

TEST(JinjaErrors, SyntaxErrorsNameLineAndColumn) {
  expect_message(compile_error("ok\n  {{ x"), ErrorCode::kParse,
                 "chat template line 2, column 3: unexpected end of template: tag '{{' is never closed");
  expect_message(compile_error("{% if x %}\nabc"), ErrorCode::kParse,
                 "'if' opened at line 1 is never closed (expected 'elif', 'else' or 'endif')");
  expect_message(compile_error("{% for x in xs %}{% endif %}"), ErrorCode::kParse,
                 "line 1, column 21: unexpected tag 'endif'");
  expect_message(compile_error("{{ 1 + }}"), ErrorCode::kParse, "line 1, column 8: unexpected end of print statement");
  expect_message(compile_error("{# never closed"), ErrorCode::kParse, "missing end of comment tag");
  expect_message(compile_error("{% raw %}abc"), ErrorCode::kParse, "missing end of raw directive");
  expect_message(compile_error("{{ 'abc }}"), ErrorCode::kParse, "unexpected char '''");
  expect_message(compile_error("{{ (1 }}"), ErrorCode::kParse, "unexpected '}', expected ')'");
  expect_message(compile_error("{% %}"), ErrorCode::kParse, "tag name expected");
  expect_message(compile_error("{{ 99999999999999999999 }}"), ErrorCode::kUnsupported, "integer literal too large");
}

TEST(JinjaErrors, UnsupportedConstructsFailAtLoad) {
  expect_message(compile_error("line 1\nline 2\n  {% include 'x' %}"), ErrorCode::kUnsupported,
                 "chat template line 3, column 6: unsupported tag 'include'");
  expect_message(compile_error("{% extends 'base' %}"), ErrorCode::kUnsupported, "unsupported tag 'extends'");
  expect_message(compile_error("{% call m() %}{% endcall %}"), ErrorCode::kUnsupported, "unsupported tag 'call'");
  expect_message(compile_error("{% frobnicate %}"), ErrorCode::kUnsupported, "unknown tag 'frobnicate'");
  expect_message(compile_error("{{ x | nosuchfilter }}"), ErrorCode::kUnsupported,
                 "line 1, column 8: unknown filter 'nosuchfilter'");
  expect_message(compile_error("{{ x | groupby('a') }}"), ErrorCode::kUnsupported, "unsupported filter 'groupby'");
  expect_message(compile_error("{{ x is nosuchtest }}"), ErrorCode::kUnsupported, "unknown test 'nosuchtest'");
  expect_message(compile_error("{% for x in xs recursive %}{% endfor %}"), ErrorCode::kUnsupported,
                 "recursive for loops are not supported");
  expect_message(compile_error("{{ f(*args) }}"), ErrorCode::kUnsupported, "*args and **kwargs");
  expect_message(compile_error("{% break %}"), ErrorCode::kParse, "'break' outside of a for loop");
}

TEST(JinjaErrors, RuntimeErrorsNameTheConstruct) {
  expect_message(render_error("{% if true %}\n  {{ raise_exception('Conversation roles must alternate') }}{% endif %}"),
                 ErrorCode::kInvalidArgument, "chat template line 2, column 6: Conversation roles must alternate");
  expect_message(render_error("{{ messages[0].content.missing.deeper }}", R"({"messages": [{"content": "x"}]})"),
                 ErrorCode::kInvalidArgument, "'str object' has no attribute 'missing'");
  expect_message(render_error("{{ nothing.attr }}"), ErrorCode::kInvalidArgument, "'nothing' is undefined");
  expect_message(render_error("{{ 'a' + 1 }}"), ErrorCode::kInvalidArgument,
                 "can only concatenate str (not \"int\") to str");
  expect_message(render_error("{{ 1 / 0 }}"), ErrorCode::kInvalidArgument, "division by zero");
  expect_message(render_error("{{ 1 < 'a' }}"), ErrorCode::kInvalidArgument, "'<' not supported between");
  expect_message(render_error("{% for a, b in [[1, 2, 3]] %}{% endfor %}"), ErrorCode::kInvalidArgument,
                 "too many values to unpack (expected 2)");
  expect_message(render_error("{% set x = 1 %}{% set x.a = 2 %}"), ErrorCode::kInvalidArgument,
                 "cannot assign attribute on non-namespace object 'x'");
  expect_message(render_error("{{ [1].append(2) }}"), ErrorCode::kInvalidArgument, "is unsafe");
  expect_message(render_error("{{ nothing | tojson }}"), ErrorCode::kInvalidArgument, "not JSON serializable");
  expect_message(render_error("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), ErrorCode::kInvalidArgument,
                 "macro 'm' takes not more than 1 argument(s)");
  expect_message(render_error("{{ 2 ** 64 }}"), ErrorCode::kOutOfRange, "integer overflow");
}

TEST(JinjaErrors, DeepNestingIsRefusedAtLoad) {
  std::string ifs;
  for (int i = 0; i < 500; ++i) ifs += "{% if true %}";
  for (int i = 0; i < 500; ++i) ifs += "{% endif %}";
  expect_message(compile_error(ifs), ErrorCode::kOutOfRange, "template nested too deeply");

  std::string parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  expect_message(compile_error(parens), ErrorCode::kOutOfRange, "template nested too deeply");

  // Long left-deep chains build deep trees without recursing in the parser.
  std::string chain = "{{ x";
  for (int i = 0; i < 200000; ++i) chain += ".a";
  expect_message(compile_error(chain + " }}"), ErrorCode::kOutOfRange, "expression nested too deeply");
  std::string sum = "{{ 1";
  for (int i = 0; i < 100000; ++i) sum += " + 1";
  expect_message(compile_error(sum + " }}"), ErrorCode::kOutOfRange, "expression nested too deeply");
  std::string filters = "{{ 1";
  for (int i = 0; i < 100000; ++i) filters += " | string";
  expect_message(compile_error(filters + " }}"), ErrorCode::kOutOfRange, "expression nested too deeply");

  expect_message(compile_error(std::string(2 << 20, 'x')), ErrorCode::kOutOfRange, "more than the limit");
}

TEST(JinjaErrors, HugeLoopsStopAtTheWorkLimit) {
  auto start = std::chrono::steady_clock::now();
  expect_message(render_error("{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}"
                              "{% endfor %}"),
                 ErrorCode::kOutOfRange, "took more than 20000000 steps");
  // About a second in a release build; generous for sanitizer and debug builds.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(120));

  JinjaLimits small;
  small.max_work = 10000;
  expect_message(render_error("{% for i in range(5000) %}{{ i }}{% endfor %}", "{}", small), ErrorCode::kOutOfRange,
                 "took more than 10000 steps");
  expect_message(render_error("{{ range(200000) | length }}"), ErrorCode::kOutOfRange, "Range too big");
  // Scanning a long list inside a loop is charged per element, not per call.
  expect_message(render_error("{% set big = range(100000) | list %}{% for i in range(100000) %}{{ 99999 in big }}"
                              "{% endfor %}"),
                 ErrorCode::kOutOfRange, "steps");
}

TEST(JinjaErrors, OutputAndValueSizesAreBounded) {
  JinjaLimits limits;
  limits.max_output_bytes = 1 << 20;
  expect_message(render_error("{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}", "{}", limits),
                 ErrorCode::kOutOfRange, "rendered chat template is larger than 1048576 bytes");
  expect_message(render_error("{{ 'x' * 10000000000 }}"), ErrorCode::kOutOfRange, "string repetition too large");
  expect_message(render_error("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
                              "{% endfor %}",
                              "{}", limits),
                 ErrorCode::kOutOfRange, "string too large");
  expect_message(render_error("{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}"
                              "{% endfor %}"),
                 ErrorCode::kOutOfRange, "list too large");
  expect_message(render_error("{{ 'ab'.replace('', 'x' * 30000000) }}"), ErrorCode::kOutOfRange, "string too large");
}

TEST(JinjaErrors, RecursionAndCyclesAreBounded) {
  expect_message(render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), ErrorCode::kOutOfRange,
                 "macro calls nested deeper than 64");
  expect_message(render_error("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}"
                              "{% endfor %}"),
                 ErrorCode::kOutOfRange, "nested deeper than 256 levels");
  // A namespace holding itself prints like Python's recursive repr and is freed.
  auto t = JinjaTemplate::compile("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  ASSERT_TRUE(t.is_ok());
  auto out = t->render(JinjaValue::dict({}));
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out.value(), "<Namespace {'me': <Namespace {...}>}>");
  // Values shared exponentially through namespaces stop at the output limit.
  expect_message(render_error("{% set ns = namespace(c=none) %}{% for i in range(300) %}"
                              "{% set ns.c = namespace(a=ns.c, b=ns.c) %}{% endfor %}{{ ns }}"),
                 ErrorCode::kOutOfRange, "larger than");
}

TEST(JinjaErrors, BadContextsAndJson) {
  auto t = JinjaTemplate::compile("{{ x }}");
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->render(JinjaValue::integer(3)).status().code(), ErrorCode::kInvalidArgument);
  nlohmann::ordered_json deep = 1;
  for (int i = 0; i < 300; ++i) deep = nlohmann::ordered_json::array({deep});
  EXPECT_EQ(jinja_from_json(deep).status().code(), ErrorCode::kOutOfRange);
  // Invalid UTF-8 in messages passes through byte for byte.
  auto ctx = jinja_from_json(nlohmann::ordered_json{{"x", std::string("a\xff\xfe"
                                                                      "b")}});
  auto out = t->render(ctx.value());
  ASSERT_TRUE(out.is_ok());
  EXPECT_EQ(out.value(),
            "a\xff\xfe"
            "b");
}

}  // namespace
}  // namespace tern
