// The Jinja engine construct by construct, each expectation what Python's
// jinja2 renders for the same template and context under transformers'
// settings (trim_blocks, lstrip_blocks, loopcontrols, its tojson).
#include "jinja/template.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "jinja/json.h"

namespace tern {
namespace {

std::string render(std::string_view source, std::string_view context_json = "{}") {
  auto tmpl = JinjaTemplate::compile(source);
  EXPECT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
  if (!tmpl.is_ok()) return "<compile error>";
  auto context = jinja_from_json(nlohmann::ordered_json::parse(context_json));
  EXPECT_TRUE(context.is_ok());
  auto out = tmpl->render(context.value());
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  return out.is_ok() ? out.value() : "<render error: " + out.status().to_string() + ">";
}

constexpr std::string_view kMessages =
    R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                     {"role": "assistant", "content": " A "}], "xs": [1, 2, 3], "d": {"b": 1, "a": [1, 2]}})";

TEST(JinjaTemplate, PrintsValuesLikePythonStr) {
  EXPECT_EQ(render("{{ none }} {{ true }} {{ 1.0 }} {{ 1e20 }} {{ 0.00001 }} {{ undefined_name }}|"),
            "None True 1.0 1e+20 1e-05 |");
  EXPECT_EQ(render("{{ [1, 'a', \"it's\", none, 1.5] }} {{ (1, 2) }} {{ (1,) }}"),
            "[1, 'a', \"it's\", None, 1.5] (1, 2) (1,)");
  EXPECT_EQ(render("{{ d }}", kMessages), "{'b': 1, 'a': [1, 2]}");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ undefined_name ~ [1] }}"), "a1None[1]");
}

TEST(JinjaTemplate, TrimBlocksAndLstripBlocks) {
  EXPECT_EQ(render("{% if true %}\n  x\n{% endif %}\ny"), "  x\ny");
  EXPECT_EQ(render("  {% if true %}\n    a\n  {% endif %}\n  {{ 'b' }}\nz"), "    a\n  b\nz");
  // `+` keeps what lstrip/trim would remove; `-` strips every whitespace character.
  EXPECT_EQ(render("  {%+ if true %}a{% endif +%}\nb"), "  a\nb");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("x {{- ' ' -}} y {{ '-' }}\n z"), "x y -\n z");
  // One trailing newline of the template is dropped, as jinja2 does.
  EXPECT_EQ(render("a\n"), "a");
  EXPECT_EQ(render("a\r\nb\rc\n\n"), "a\nb\nc\n");
}

TEST(JinjaTemplate, CommentsAndRaw) {
  EXPECT_EQ(render("{# c #}\n  {# indented #}\nx {# inline #} y\n  {#- strip #}   z"), "x  y   z");
  EXPECT_EQ(render("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(render("{% raw -%}   {{ a }}  {%- endraw %}|"), "{{ a }}|");
}

TEST(JinjaTemplate, IfElifElse) {
  const char* t = "{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(t, R"({"n": 1})"), "one");
  EXPECT_EQ(render(t, R"({"n": 2})"), "two");
  EXPECT_EQ(render(t, R"({"n": 5})"), "many");
  EXPECT_EQ(render("{% if not x is defined %}undef{% endif %}"), "undef");
  EXPECT_EQ(render("{% if [] or {} or '' or 0 or 0.0 or none %}t{% else %}f{% endif %}"), "f");
}

TEST(JinjaTemplate, ForLoopVariables) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
                   kMessages),
            "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('a', 'b') }};{% endfor %}",
                   kMessages),
            "2a;13b;2a;");
  EXPECT_EQ(render("{% for x in [1, 1, 2, 1] %}{{ loop.changed(x) }}{% endfor %}"), "TrueFalseTrueTrue");
  EXPECT_EQ(render("{% for x in xs if x > 1 %}{{ loop.index }}/{{ loop.length }} {% endfor %}", kMessages), "1/2 2/2 ");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}{% for x in nothing %}{% else %}!{% endfor %}"),
            "empty!");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", kMessages), "b=1;a=[1, 2];");
  EXPECT_EQ(render("{% for k, v in d | items %}{{ k }}{% endfor %}{% for k in d %}{{ k }}{% endfor %}", kMessages),
            "baba");
  EXPECT_EQ(render("{% for c in 'héllo' %}{{ c }}|{% endfor %}"), "h|é|l|l|o|");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif %}"
                   "{{ x }}{% endfor %}",
                   kMessages),
            "1");
  EXPECT_EQ(
      render("{% for x in xs %}{% for y in xs %}{{ loop.index }}{% endfor %}{{ loop.index }};{% endfor %}", kMessages),
      "1231;1232;1233;");
}

TEST(JinjaTemplate, ScopesFollowJinja2) {
  // A set inside a loop body is per iteration and does not leak; an if does not scope.
  EXPECT_EQ(render("{% set x = 0 %}{% for i in xs %}{{ x }}{% set x = x + 1 %}{{ x }},{% endfor %}{{ x }}", kMessages),
            "01,01,01,0");
  EXPECT_EQ(
      render("{% for i in xs %}{% if loop.first %}{% set y = 5 %}{% endif %}{{ y }},{% endfor %}{{ y }}", kMessages),
      "5,,,");
  EXPECT_EQ(render("{% if true %}{% set x = 7 %}{% endif %}{{ x }}"), "7");
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
  EXPECT_EQ(render("{% set messages = messages[1:] %}{{ messages | length }}", kMessages), "2");
}

TEST(JinjaTemplate, Namespaces) {
  EXPECT_EQ(
      render("{% set ns = namespace(total=0, seen=[]) %}{% for x in xs %}{% set ns.total = ns.total + x %}"
             "{% set ns.seen = ns.seen + [x] %}{% endfor %}{{ ns.total }} {{ ns.seen }} {{ ns.missing is defined }}",
             kMessages),
      "6 [1, 2, 3] False");
  EXPECT_EQ(render("{{ namespace(a=1) }}"), "<Namespace {'a': 1}>");
}

TEST(JinjaTemplate, Macros) {
  EXPECT_EQ(render("{% macro f(a, b=2) %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(1, 3) }}{{ f(b=5, a=0) }}"
                   "{{ f() }}"),
            "[12][13][05][2]");
  EXPECT_EQ(render("{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, z=4) }}"),
            "1(2, 3){'z': 4}");
  // Macros see template variables as they are when called.
  EXPECT_EQ(render("{% set x = 1 %}{% macro m() %}{{ x }}{{ z }}{% endmacro %}{% set z = 3 %}{{ m() }}"
                   "{% set x = 2 %}{{ m() }}"),
            "1323");
  EXPECT_EQ(render("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}"
                   "{{ fact(5) }}"),
            "120");
}

TEST(JinjaTemplate, SetBlockWithAndFilterBlocks) {
  EXPECT_EQ(render("{% set x %}hello {{ 1 }}{% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }}"),
            "[hello 1]ABC");
  EXPECT_EQ(render("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}|"), "3|");
  EXPECT_EQ(render("{% filter trim | upper %}  abc {{ 'd' }}  {% endfilter %}|"), "ABC D|");
  EXPECT_EQ(render("{% generation %}kept{% endgeneration %}"), "kept");
}

TEST(JinjaTemplate, Operators) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} "
                   "{{ 7.5 // 2 }} {{ -5.5 % 2 }}"),
            "3 -4 2 3.5 2.0 1024 0.5 3.0 0.5");
  EXPECT_EQ(render("{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }} {{ 2 + 3 * 4 }} {{ 1 ~ (2 + 3) }}"),
            "64 4 5 14 15");
  EXPECT_EQ(render("{{ 'ab' * 2 }} {{ [1] * 3 }} {{ [1] + [2] }} {{ true + 1 }} {{ 0.1 + 0.2 }}"),
            "abab [1, 1, 1] [1, 2] 2 0.30000000000000004");
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ 3 < 4 < 5 }} {{ 3 < 4 > 5 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }}"),
            "True True False True True");
  EXPECT_EQ(render("{{ 'a' in 'cat' }} {{ 2 in xs }} {{ 'a' in d }} {{ 'z' not in d }} {{ 'x' in undefined_name }}",
                   kMessages),
            "True True True True False");
  EXPECT_EQ(render("{{ true and 'x' }} {{ false or 'y' }} {{ 0 or none }} {{ not 1 == 2 }}"), "x y None True");
  EXPECT_EQ(
      render("{{ 'yes' if xs else 'no' }} {{ 'a' if false else 'b' if false else 'c' }} [{{ 1 if false }}]", kMessages),
      "yes c []");
  EXPECT_EQ(render("{{ '%s-%d|%5.2f|%-3s|' % ('a', 3, 3.14159, 'b') }}"), "a-3| 3.14|b  |");
}

TEST(JinjaTemplate, SubscriptsSlicesAndAttributes) {
  EXPECT_EQ(render("{{ xs[0] }} {{ xs[-1] }} {{ xs[10] }}| {{ xs[1:] }} {{ xs[::-1] }} {{ xs[0:3:2] }} {{ xs.1 }}",
                   kMessages),
            "1 3 | [2, 3] [3, 2, 1] [1, 3] 2");
  EXPECT_EQ(render("{{ 'héllo'[1] }} {{ 'héllo'[1:3] }} {{ 'abc'[::-1] }}"), "é él cba");
  EXPECT_EQ(
      render("{{ messages[1].role }} {{ messages[1]['content'] }} {{ messages[0].missing is defined }}", kMessages),
      "user U False");
  EXPECT_EQ(
      render("{{ d.get('b') }} {{ d.get('z') }} {{ d.get('z', 5) }} {{ d.keys() | list }} {{ d.values() | list }}",
             kMessages),
      "1 None 5 ['b', 'a'] [1, [1, 2]]");
}

TEST(JinjaTemplate, StringMethods) {
  EXPECT_EQ(render("{{ ' a '.strip() }}|{{ 'xay'.strip('xy') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|"),
            "a|a|a|a|");
  EXPECT_EQ(render("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('x', 'lo')) }} {{ 'abc'.upper() }} "
                   "{{ 'ABC'.lower() }} {{ 'they\\'re bill\\'s'.title() }}"),
            "True True ABC abc They'Re Bill'S");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} "
                   "{{ 'a-b-c'.rsplit('-', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a-b', 'c']");
  EXPECT_EQ(render("{{ 'aXbX'.replace('X', '-') }} {{ 'aXbX'.replace('X', '', 1) }} {{ 'a\\nb'.splitlines() }} "
                   "{{ ','.join(['a', 'b']) }} {{ 'héX'.find('X') }} {{ '{}-{x}'.format(1, x=2) }}"),
            "a-b- abX ['a', 'b'] a,b 2 1-2");
}

TEST(JinjaTemplate, Filters) {
  EXPECT_EQ(render("{{ '  a b  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'hELLO wORLD' | capitalize }}|"
                   "{{ \"they're bill's\" | title }}|{{ 'x' | upper }}{{ 'É' | lower }}"),
            "a b|a|Hello world|They're Bill's|Xé");
  EXPECT_EQ(render("{{ xs | length }} {{ d | count }} {{ 'héllo' | length }} {{ nothing | length }}", kMessages),
            "3 2 5 0");
  EXPECT_EQ(render("{{ nothing | default('d') }} {{ none | default('d') }} {{ '' | default('d', true) }}"), "d None d");
  EXPECT_EQ(
      render("{{ xs | join }} {{ xs | join(', ') }} {{ xs | first }} {{ xs | last }} {{ [] | first }}|", kMessages),
      "123 1, 2, 3 1 3 |");
  EXPECT_EQ(render("{{ 'ab' | list }} {{ d | list }} {{ 5 | string }} {{ '42' | int }} {{ '4.7' | int }} "
                   "{{ 'x' | int }} {{ '1.5' | float }}",
                   kMessages),
            "['a', 'b'] ['b', 'a'] 5 42 4 0 1.5");
  EXPECT_EQ(
      render("{{ 'aXb' | replace('X', '-') }} {{ '<a>&' | escape }} {{ '<b>' | safe }} {{ 'a\\nb' | indent(2) }}"),
      "a-b &lt;a&gt;&amp; <b> a\n  b");
  EXPECT_EQ(render("{{ messages | map(attribute='role') | join(',') }} "
                   "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | first }} "
                   "{{ messages | rejectattr('role', 'in', ['user', 'system']) | list | length }}",
                   kMessages),
            "system,user,assistant U 1");
  EXPECT_EQ(render("{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'a'] | sort }} {{ [1, 1, 2] | unique | list }} "
                   "{{ xs | sum }} {{ xs | max }} {{ xs | reverse | list }} {{ xs | select('odd') | list }}",
                   kMessages),
            "[1, 2, 3] ['A', 'a', 'b'] [1, 2] 6 3 [3, 2, 1] [1, 3]");
  EXPECT_EQ(render("{{ {'b': 2, 'a': 1} | dictsort }} {{ 2.5 | round }} {{ 2.567 | round(2) }} {{ -3 | abs }}"),
            "[('a', 1), ('b', 2)] 2.0 2.57 3");
  // A generator (map, select, ...) is truthy even when empty, as in jinja2.
  EXPECT_EQ(render("{% if [] | select %}t{% endif %}"), "t");
}

TEST(JinjaTemplate, Tests) {
  EXPECT_EQ(render("{{ xs is iterable }} {{ 'a' is string }} {{ d is mapping }} {{ 1 is number }} {{ 1.0 is integer }} "
                   "{{ true is boolean }} {{ none is none }} {{ nothing is none }} {{ xs is sequence }} "
                   "{{ 3 is odd }} {{ 6 is divisibleby 3 }} {{ 2 is in [1, 2] }} {{ x is not defined }}",
                   kMessages),
            "True True True True False True True False True True True True True");
}

TEST(JinjaTemplate, ToJsonMatchesPythonJsonDumps) {
  EXPECT_EQ(render("{{ d | tojson }}", kMessages), R"({"b": 1, "a": [1, 2]})");
  EXPECT_EQ(render("{{ d | tojson(indent=2) }}", kMessages), "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    2\n  ]\n}");
  EXPECT_EQ(render("{{ d | tojson(sort_keys=true, separators=(',', ':')) }}", kMessages), R"({"a":[1,2],"b":1})");
  EXPECT_EQ(render(R"({{ "é\n\"<>&'" | tojson }} {{ 'é😀' | tojson(ensure_ascii=true) }} {{ '\x01\x7f' | tojson }})"),
            "\"é\\n\\\"<>&'\" \"\\u00e9\\ud83d\\ude00\" \"\\u0001\x7f\"");
  EXPECT_EQ(render("{{ [1.0, 1e-07, 1e16, none, true] | tojson }} {{ {} | tojson(indent=2) }}"),
            "[1.0, 1e-07, 1e+16, null, true] {}");
}

TEST(JinjaTemplate, CompiledTemplateRendersManyTimes) {
  auto tmpl = JinjaTemplate::compile(
      "{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}"
      "{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(tmpl.is_ok());
  for (int i = 1; i <= 3; ++i) {
    auto ctx = jinja_from_json(nlohmann::ordered_json{{"xs", std::vector<int>(static_cast<size_t>(i), i)}});
    auto out = tmpl->render(ctx.value());
    ASSERT_TRUE(out.is_ok());
    EXPECT_EQ(out.value(), std::to_string(i * i));
  }
}

}  // namespace
}  // namespace tern
