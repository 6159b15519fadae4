// The Jinja subset itself, through ChatTemplate's public API: whitespace control with Hugging
// Face's trim_blocks/lstrip_blocks, errors (parse position, raise_exception, runtime), Undefined,
// scoping, operators, filters, tests and methods. Expected strings match Python Jinja2 3.1.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "chat/chat_template.h"

namespace kvw {
namespace {

const std::vector<ChatMessage> kMessages = {
    {"system", "sys"}, {"user", "Hello"}, {"assistant", "Hi"}, {"user", "Who are you?"}};

Result<std::string> render(std::string_view source,
                           const std::vector<ChatMessage>& messages = kMessages) {
  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl.ok()) return tmpl.error();
  ChatRenderOptions opts;
  opts.bos_token = "<s>";
  opts.eos_token = "</s>";
  return tmpl->render(messages, opts);
}

std::string render_ok(std::string_view source) {
  auto r = render(source);
  EXPECT_TRUE(r.ok()) << source << " -> " << (r.ok() ? "" : r.message());
  return r.ok() ? r.value() : "<error>";
}

std::string error_of(std::string_view source) {
  auto r = render(source);
  EXPECT_FALSE(r.ok()) << source << " rendered " << (r.ok() ? r.value() : "");
  return r.ok() ? "" : r.message();
}

TEST(Jinja, TrimBlocksRemovesNewlineAfterStatementTagsOnly) {
  EXPECT_EQ(render_ok("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(render_ok("{{ 'a' }}\nb"), "a\nb");
  EXPECT_EQ(render_ok("a{# note #}\nb"), "ab");
  EXPECT_EQ(render_ok("{% if true +%}\nx{% endif %}"), "\nx");
}

TEST(Jinja, LstripBlocksRemovesIndentOnlyAtLineStart) {
  EXPECT_EQ(render_ok("  {% if true %}x{% endif %}"), "x");
  EXPECT_EQ(render_ok("a\n    {% if true %}x\n    {% endif %}b"), "a\nx\nb");
  EXPECT_EQ(render_ok("a  {% if true %}x{% endif %}"), "a  x");
  EXPECT_EQ(render_ok("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render_ok("  {{ 'v' }}"), "  v");  // lstrip_blocks leaves {{ }} alone
}

TEST(Jinja, DashMarkersStripAllWhitespaceOnTheirSide) {
  EXPECT_EQ(render_ok("a \n  {{- 'b' -}} \n  c"), "abc");
  EXPECT_EQ(render_ok("x\n\n{%- if true -%}\n\n y \n\n{%- endif -%}\n\nz"), "xyz");
  EXPECT_EQ(render_ok("{% for m in messages -%}\n  {{ m.role }}\n{%- endfor %}"),
            "systemuserassistantuser");
}

TEST(Jinja, ParseErrorNamesLineAndColumn) {
  EXPECT_EQ(error_of("Hello\n{% if %}x{% endif %}"),
            "chat template 2:7: expected an expression, got '%}'");
  EXPECT_EQ(error_of("{{ 'abc }}"), "chat template 1:4: unterminated string literal");
  EXPECT_EQ(error_of("ab\n  {# never closed"), "chat template 2:3: unclosed comment '{#'");
  EXPECT_EQ(error_of("{{ 1 + }}"), "chat template 1:8: expected an expression, got '}}'");
  EXPECT_EQ(error_of("{{ a ; b }}"), "chat template 1:6: unexpected character ';'");
}

TEST(Jinja, UnclosedAndUnknownBlocksAreParseErrors) {
  EXPECT_NE(error_of("{% for m in messages %}x").find("'for' is never closed with 'endfor'"),
            std::string::npos);
  EXPECT_NE(error_of("{% if x %}a{% endfor %}").find("1:15: unexpected 'endfor' outside its block"),
            std::string::npos);
  EXPECT_NE(error_of("{% include 'other.jinja' %}").find("unsupported statement 'include'"),
            std::string::npos);
  EXPECT_FALSE(ChatTemplate::parse("{{ messages[0] }").ok());
}

TEST(Jinja, RaiseExceptionMessageIsTheError) {
  EXPECT_EQ(error_of("ok{{ raise_exception('Bad roles: ' ~ messages[0].role) }}"),
            "Bad roles: system");
  EXPECT_EQ(
      error_of("{% macro check() %}{{ raise_exception('from macro') }}{% endmacro %}{{ check() }}"),
      "from macro");
}

TEST(Jinja, RuntimeErrorsNameThePosition) {
  EXPECT_EQ(error_of("{{ 'a' + 1 }}"),
            "chat template 1:8: unsupported operand types for +: string and int");
  EXPECT_EQ(error_of("\n{{ 1 | frobnicate }}"), "chat template 2:6: unknown filter 'frobnicate'");
  EXPECT_EQ(error_of("{{ 1 / 0 }}"), "chat template 1:6: division by zero");
  EXPECT_EQ(error_of("{% set d = {} %}{% set d.x = 1 %}"),
            "chat template line 1: cannot set attribute 'x' on 'd' (dict): only namespace() "
            "objects can be changed");
}

TEST(Jinja, UndefinedPrintsEmptyAndIsFalsyButUsingItFails) {
  EXPECT_EQ(render_ok("[{{ nope }}|{{ messages[10] }}|{{ messages[1].nope }}|{{ 'x' if false }}]"),
            "[|||]");
  EXPECT_EQ(render_ok("{{ messages[1].content.content is defined }}"), "False");
  EXPECT_EQ(
      render_ok("{% if nope %}T{% else %}F{% endif %}{{ nope is defined }}{{ nope is undefined }}"),
      "FFalseTrue");
  EXPECT_EQ(render_ok("{{ nope | length }}{{ nope | default('d') }}{{ nope ~ 'x' }}"), "0dx");
  EXPECT_EQ(render_ok("{% for x in nope %}x{% else %}none{% endfor %}"), "none");
  EXPECT_EQ(error_of("{{ nope + 1 }}"), "chat template 1:9: 'nope' is undefined");
  EXPECT_EQ(error_of("{{ 1 ~ 2 + 3 }}"),
            "chat template 1:10: unsupported operand types for +: string and int");
  EXPECT_EQ(error_of("{{ nope.attr }}"), "chat template 1:8: 'nope' is undefined");
  EXPECT_EQ(error_of("{{ messages[10].role }}"),
            "chat template 1:16: list object has no element 10");
  EXPECT_EQ(error_of("{{ messages[1]['x']['y'] }}"),
            "chat template 1:20: 'dict object' has no attribute 'x'");
  EXPECT_NE(error_of("{{ nope() }}").find("'nope' is undefined or not a function"),
            std::string::npos);
}

TEST(Jinja, LoopVariables) {
  EXPECT_EQ(
      render_ok("{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}"
                "{{ loop.last }}{{ loop.length }}{{ loop.revindex }};{% endfor %}"),
      "10TrueFalse33;21FalseFalse32;32FalseTrue31;");
  EXPECT_EQ(
      render_ok("{% for x in range(10) if x % 2 == 0 %}{% if x > 6 %}{% break %}{% endif %}"
                "{% if x == 2 %}{% continue %}{% endif %}{{ x }}/{{ loop.length }},{% endfor %}"),
      "0/5,4/5,6/5,");
  EXPECT_EQ(render_ok("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"),
            "a=1;b=2;");
  EXPECT_EQ(
      render_ok("{% for m in messages %}{{ loop.previtem.role if not loop.first }},{% endfor %}"),
      ",system,user,assistant,");
}

TEST(Jinja, SetInLoopDoesNotLeakButNamespaceDoes) {
  EXPECT_EQ(
      render_ok("{% set x = 1 %}{% for i in [5, 6] %}{% set x = i %}{{ x }}{% endfor %}{{ x }}"),
      "561");
  EXPECT_EQ(render_ok("{% set ns = namespace(n=0, seen=false) %}{% for i in [1, 2, 3] %}"
                      "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}{{ ns.seen }}"),
            "6False");
  EXPECT_EQ(render_ok("{% if true %}{% set y = 'inside' %}{% endif %}{{ y }}"), "inside");
  EXPECT_EQ(render_ok("{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render_ok("{% set s %}a{{ 1 + 1 }}{% endset %}[{{ s }}]"), "[a2]");
}

TEST(Jinja, OperatorsFollowPython) {
  EXPECT_EQ(
      render_ok("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}"),
      "3 -4 1 2 3.5 1024");
  EXPECT_EQ(
      render_ok("{{ 1 ~ 'a' }} {{ 3 * 'ab' }} {{ [1] + [2] }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }}"),
      "1a ababab [1, 2] 7 9");
  EXPECT_EQ(
      render_ok("{{ 1 < 2 and 'a' in 'cat' and 3 not in [1, 2] }} {{ none or 'x' }} {{ 0 and 1 }}"),
      "True x 0");
  EXPECT_EQ(
      render_ok("{{ 'y' if 1 > 2 else 'n' }}[{{ 'y' if false }}]{{ not 1 == 2 }}{{ 1 == 1.0 }}"),
      "n[]TrueTrue");
  EXPECT_EQ(
      render_ok("{{ -3 | abs }} {{ -2 ** 2 }} {{ 'a' ~ (1 + 2) }} {{ -7.5 // 2 }} {{ 2 ** -1 }}"),
      "3 4 a3 -4.0 0.5");
  EXPECT_EQ(
      render_ok(
          "{{ 'user' in messages[1] }}{{ 'role' in messages[1] }}{{ messages[1] == messages[1] }}"),
      "FalseTrueTrue");
}

TEST(Jinja, SubscriptsAndSlices) {
  EXPECT_EQ(render_ok("{{ [1,2,3,4][1:] }}{{ 'hello'[::-1] }}{{ [1,2,3][-1] }}{{ 'abc'[:-1] }}{{ "
                      "messages[-1].content }}"),
            "[2, 3, 4]olleh3abWho are you?");
  EXPECT_EQ(render_ok("{{ messages[1:3] | map(attribute='role') | join(',') }}"), "user,assistant");
  EXPECT_EQ(render_ok("{{ 'héllo'[1] }}{{ 'héllo' | length }}{{ 'héllo'[:2] }}"), "é5hé");
}

TEST(Jinja, ValuesPrintLikePython) {
  EXPECT_EQ(
      render_ok(
          "{{ none }}|{{ true }}|{{ 1.0 }}|{{ 0.1 + 0.2 }}|{{ [1, 'a', none] }}|{{ {'k': 'v'} }}"),
      "None|True|1.0|0.30000000000000004|[1, 'a', None]|{'k': 'v'}");
  EXPECT_EQ(
      render_ok(
          "{{ 100.0 }}|{{ 1e20 }}|{{ 2.5e-7 }}|{{ 1/3 }}|{{ (1,) }}|{{ {'a': 1}.items() | list }}"),
      "100.0|1e+20|2.5e-07|0.3333333333333333|(1,)|[('a', 1)]");
  EXPECT_EQ(render_ok("{{ 'a\\nb' }}|{{ \"it's\" }}|{{ 'x' 'y' }}"), "a\nb|it's|xy");
}

TEST(Jinja, Tests) {
  EXPECT_EQ(
      render_ok("{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ {} is mapping }}{{ [1] "
                "is iterable }}"
                "{{ 3 is odd }}{{ 4 is divisibleby 2 }}{{ 1 is not none }}{{ 'a' is sameas 'a' }}"),
      "TrueTrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(
      render_ok("{{ true is boolean }}{{ 1 is boolean }}{{ 'ab' is lower }}{{ 2 is equalto 2 }}"),
      "TrueFalseTrueTrue");
}

TEST(Jinja, StringAndDictMethods) {
  EXPECT_EQ(render_ok("{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ "
                      "' a  b '.split() }}"),
            "x|a|['a', 'b', '', 'c']|['a', 'b']");
  EXPECT_EQ(
      render_ok(
          "{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}{{ 'abc'.upper() }}"
          "{{ 'ABC'.lower() }}{{ 'hello world'.title() }}{{ 'a-b'.replace('-', '+') }}"),
      "TrueTrueABCabcHello Worlda+b");
  EXPECT_EQ(render_ok("{{ messages[1].get('role') }}{{ messages[1].get('x', 'dflt') }}{{ "
                      "messages[1].keys() | list }}"),
            "userdflt['role', 'content']");
  EXPECT_EQ(render_ok("{{ 'a</think>b</think>c'.split('</think>')[-1] }}"), "c");
}

TEST(Jinja, Filters) {
  EXPECT_EQ(render_ok("{{ [3, 1, 2] | sort | join(',') }}|{{ ['a', 'b'] | length }}|{{ ' x ' | "
                      "trim | upper }}"),
            "1,2,3|2|X");
  EXPECT_EQ(render_ok("{{ {'a': [1, 'b', none, true], 'q': 'say \"hi\"\\n'} | tojson }}"),
            "{\"a\": [1, \"b\", null, true], \"q\": \"say \\\"hi\\\"\\n\"}");
  EXPECT_EQ(render_ok("{{ {'a': 1, 'b': [1, 2]} | tojson(indent=2) }}"),
            "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    2\n  ]\n}");
  EXPECT_EQ(render_ok("{{ messages | selectattr('role', 'equalto', 'user') | "
                      "map(attribute='content') | join('+') }}"),
            "Hello+Who are you?");
  EXPECT_EQ(
      render_ok("{{ messages | rejectattr('role', 'in', ['user', 'system']) | list | length }}"),
      "1");
  EXPECT_EQ(render_ok("{{ '' | default('empty', true) }}{{ 0 | default(5) }}{{ '42' | int + 1 }}{{ "
                      "'x' | int }}"),
            "empty0430");
  EXPECT_EQ(
      render_ok("{{ [1, 2, 1] | unique | list }}{{ [1, 2] | reverse | list }}{{ 'ab' | first }}"),
      "[1, 2][2, 1]a");
}

TEST(Jinja, Macros) {
  EXPECT_EQ(render_ok("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                      "{{ greet('Bob') }} {{ greet('Al', punct='?') }}"),
            "Hi Bob! Hi Al?");
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").find("nested too deep"),
            std::string::npos);
}

TEST(Jinja, HostileTemplatesFailCleanly) {
  EXPECT_NE(error_of("{{ range(100000000) | length }}").find("range() too large"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' * 100000000000 }}").find("too large"), std::string::npos);
}

TEST(Jinja, DeepNestingIsAParseErrorNotAStackOverflow) {
  const std::string parens =
      "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  EXPECT_NE(error_of(parens).find("nests deeper than"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_NE(error_of(ifs).find("nests deeper than"), std::string::npos);
  EXPECT_NE(error_of("{{ " + std::string(100000, '-') + "1 }}").find("nests deeper than"),
            std::string::npos);
  EXPECT_EQ(
      render_ok("{{ ((((((((((1 + 2)))))))))) * [[[[[[[[3]]]]]]]][0][0][0][0][0][0][0][0] }}"),
      "9");
}

TEST(Jinja, NamespaceHoldingItselfDoesNotRecurseForever) {
  EXPECT_EQ(
      render_ok("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns.me.me.a }}{{ ns == ns }}"
                "{{ namespace(a=1) == namespace(a=1) }}"),
      "1TrueFalse");
  EXPECT_NE(render_ok("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}").find("{...}"),
            std::string::npos);
  EXPECT_NE(
      error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}").find("circular"),
      std::string::npos);
}

TEST(Jinja, EveryPrefixOfARealTemplateParsesOrFailsCleanly) {
  // Truncated templates (as from a damaged GGUF) must give an error or a render, never a crash.
  const std::string src =
      "{%- if messages[0]['role'] == 'system' %}{%- set sys = messages[0]['content'] | trim %}"
      "{%- set msgs = messages[1:] %}{%- else %}{%- set msgs = messages %}{%- endif %}"
      "{%- set ns = namespace(n=0) %}{# count #}{%- for m in msgs if m.role != 'tool' %}"
      "{{- '<|' ~ m.role ~ '|>\n' + m['content'].strip() ~ ('' if loop.last else '\n') }}"
      "{%- set ns.n = ns.n + 1 %}{%- endfor %}{{ sys | default('none') }}{{ ns.n }}";
  ASSERT_TRUE(render(src).ok());
  int num_ok = 0;
  for (size_t n = 0; n <= src.size(); ++n) {
    auto r = render(src.substr(0, n));
    num_ok += r.ok() ? 1 : 0;
  }
  EXPECT_GT(num_ok, 0);
}

TEST(Jinja, ConcurrentRendersOfOneTemplateAgree) {
  auto tmpl = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "<{{ m.role }}:{{ m.content | trim }}>{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  const std::string expected = "<system:sys><user:Hello><assistant:Hi><user:Who are you?>4";
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto r = tmpl->render(kMessages, ChatRenderOptions{});
        if (!r.ok() || r.value() != expected) ++mismatches[(size_t)t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace kvw
