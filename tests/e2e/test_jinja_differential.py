"""tern's Jinja engine against Python jinja2, byte for byte.

For every template in tests/data/chat_templates/ this renders many seeded random
conversations (roles system/user/assistant/tool, unicode, quotes, newlines, braces,
template-looking text, empty strings, tool lists and tool calls, multi-part content)
with jinja2 set up exactly as transformers does (ImmutableSandboxedEnvironment,
trim_blocks, lstrip_blocks, loopcontrols, raise_exception, its own tojson) and with
tern_jinja_render, then requires the same bytes, or an error on both sides.

The binary comes from $TERN_JINJA_RENDER or build/bin/tern_jinja_render.
$TERN_JINJA_CASES (default 300) sets the cases per template, $TERN_JINJA_SEED the seed.
"""

import json
import os
import pathlib
import random
import subprocess

import pytest

jinja2 = pytest.importorskip("jinja2", reason="jinja2 is needed for the differential test (pip install jinja2)")
import jinja2.ext  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = sorted((ROOT / "tests" / "data" / "chat_templates").glob("*.jinja"))
CASES = int(os.environ.get("TERN_JINJA_CASES", "300"))
SEED = int(os.environ.get("TERN_JINJA_SEED", "20250101"))

# Templates whose models take tools, or content given as a list of parts.
TOOL_TEMPLATES = {"llama_3_1", "qwen_2_5", "kitchen_sink"}
PART_TEMPLATES = {"gemma_3", "kitchen_sink"}

SPECIAL_TOKENS = {
    "bos_token": "<s>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "pad_token": "<pad>",
    "cls_token": "<|begin_of_sentence|>",
    "sep_token": "<|end_of_sentence|>",
    "mask_token": "<mask:1>",
}

PIECES = [
    "hello", "Hello, world!", " leading", "trailing ", "\n", "\n\n", "  ", "\t", "\r\n",
    '"quoted"', "'single'", "it's", "{{ not a tag }}", "{% if x %}", "{#", "#}", "}}", "{%-",
    "<|im_end|>", "[INST]", "\\", "\\n", "ünïcødé", "你好，世界", "こんにちは", "🙂", "😀👍",
    "Ω≈ç√", "\u00a0", "\u2028", "\x01", "\x1f", "\x7f", "<script>&amp;", "a", "A", "#heading",
    "1", "3.14", "true", "None", "ÉCOLE", "straße", "Ünïcode Title", "why?", "yes!", "-", "(x)",
]


def make_env():
    """jinja2 as transformers' _compile_jinja_template sets it up."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def text(rng):
    if rng.random() < 0.08:
        return ""
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 6)))


def number(rng):
    return rng.choice([0, 1, -7, 42, 2**40, 0.5, 0.1, -0.0, 3.0, 1e-07, 1.5e16, 123456.789, 1e100, 2.5])


def json_value(rng, depth=0):
    kind = rng.randint(0, 7 if depth < 3 else 4)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return number(rng)
    if kind in (3, 4):
        return text(rng)
    if kind == 5:
        return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {text(rng)[:10] or "k": json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def tool(rng, i):
    props = {}
    for j in range(rng.randint(0, 3)):
        props[f"arg{j}_{rng.choice(['city', 'unit', 'n', 'ünï'])}"] = {
            "type": rng.choice(["string", "number", "boolean"]),
            "description": text(rng),
            **({"default": json_value(rng)} if rng.random() < 0.3 else {}),
        }
    fn = {"name": f"tool_{i}_{rng.choice(['get_weather', 'search', 'calc'])}", "description": text(rng)}
    if rng.random() < 0.9:
        fn["parameters"] = {"type": "object", "properties": props, "required": list(props)[:1]}
    return {"type": "function", "function": fn}


def tool_calls(rng, tools):
    calls = []
    for _ in range(rng.choice([1, 1, 1, 2])):
        name = rng.choice(tools)["function"]["name"] if tools else "fn"
        args = {f"a{k}": json_value(rng) for k in range(rng.randint(0, 3))}
        if rng.random() < 0.2:
            args = json.dumps(args)  # some clients send arguments as a JSON string
        calls.append({"id": f"call_{rng.randint(0, 999)}", "type": "function", "function": {"name": name, "arguments": args}})
    return calls


def content(rng, name):
    if name in PART_TEMPLATES and rng.random() < 0.25:
        parts = []
        for _ in range(rng.randint(1, 3)):
            parts.append({"type": "image"} if rng.random() < 0.3 else {"type": "text", "text": text(rng)})
        return parts
    return text(rng)


def message(rng, role, name, tools):
    m = {"role": role, "content": content(rng, name)}
    if role == "assistant" and tools and rng.random() < 0.4:
        m["tool_calls"] = tool_calls(rng, tools)
        if rng.random() < 0.5:
            m["content"] = None if name != "llama_3_1" else ""
    if role == "tool" and rng.random() < 0.3:
        m["name"] = "tool_0_search"
    return m


def conversation(rng, name):
    tools = [tool(rng, i) for i in range(rng.randint(1, 3))] if name in TOOL_TEMPLATES and rng.random() < 0.5 else None
    messages = []
    if rng.random() < 0.5:
        # Well formed: optional system, then user/assistant turns (and tool turns after calls).
        if rng.random() < 0.5 and name != "gemma":  # Gemma's template refuses system messages
            messages.append(message(rng, "system", name, tools))
        for turn in range(rng.randint(0, 4)):
            messages.append(message(rng, "user", name, tools))
            if turn < 3 or rng.random() < 0.5:
                reply = message(rng, "assistant", name, tools)
                messages.append(reply)
                if reply.get("tool_calls") and name in TOOL_TEMPLATES and rng.random() < 0.5:
                    messages.append(message(rng, "tool", name, tools))
    else:
        roles = ["system", "user", "assistant", "tool"]
        messages = [message(rng, rng.choice(roles), name, tools) for _ in range(rng.randint(0, 7))]
    case = {
        "messages": messages,
        "add_generation_prompt": rng.random() < 0.5,
        "special_tokens": dict(SPECIAL_TOKENS),
    }
    if tools is not None:
        case["tools"] = tools
    if rng.random() < 0.2:
        case["special_tokens"]["bos_token"] = rng.choice(["", "<|begin_of_text|>", "<bos>"])
    kwargs = {}
    if name == "llama_3_1" and rng.random() < 0.5:
        kwargs = rng.choice([{"date_string": "01 Jan 2025"}, {"tools_in_user_message": False},
                             {"builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"]}])
    if name == "ernie_4_5" and rng.random() < 0.3:
        kwargs = {"cls_token": "<cls>", "sep_token": "<sep>"}
    if kwargs:
        case["chat_template_kwargs"] = kwargs
    return case


def python_render(template, case):
    """What transformers' apply_chat_template renders: (text, None) or (None, error message)."""
    kwargs = {**case["special_tokens"], **case.get("chat_template_kwargs", {})}
    try:
        text = template.render(
            messages=case["messages"],
            tools=case.get("tools"),
            documents=None,
            add_generation_prompt=case["add_generation_prompt"],
            **kwargs,
        )
        return text, None
    except (jinja2.exceptions.TemplateError, TypeError, ValueError, ZeroDivisionError, OverflowError) as e:
        return None, str(e)


@pytest.fixture(scope="module")
def render_bin():
    path = os.environ.get("TERN_JINJA_RENDER", str(ROOT / "build" / "bin" / "tern_jinja_render"))
    if not os.path.exists(path):
        pytest.skip(f"tern_jinja_render not found at {path}; build it (target tern_jinja_render) or set TERN_JINJA_RENDER")
    return path


def tern_render_batch(render_bin, template_path, cases):
    lines = "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in cases)
    proc = subprocess.run(
        [render_bin, "--batch", str(template_path)], input=lines.encode("utf-8"), capture_output=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    # split on "\n" only: rendered text may hold U+2028 and friends, which splitlines() also breaks on
    results = [json.loads(line) for line in proc.stdout.decode("utf-8").split("\n") if line]
    assert len(results) == len(cases)
    return results


@pytest.mark.parametrize("template_path", TEMPLATES, ids=[p.stem for p in TEMPLATES])
def test_renders_like_jinja2(render_bin, template_path):
    name = template_path.stem
    source = template_path.read_text(encoding="utf-8")
    template = make_env().from_string(source)
    rng = random.Random(f"{SEED}-{name}")
    cases = [conversation(rng, name) for _ in range(CASES)]
    expected = [python_render(template, c) for c in cases]
    got = tern_render_batch(render_bin, template_path, cases)

    mismatches = []
    for case, (want, error), have in zip(cases, expected, got):
        if want is None:
            # Both fail, and tern says what jinja2 says (raise_exception's text, the missing element, ...).
            if have["ok"] or error not in have["error"]:
                mismatches.append((case, "jinja2 error: " + error, have.get("text") or have["error"]))
        elif not have["ok"]:
            mismatches.append((case, want, "tern error: " + have["error"]))
        elif have["text"] != want:
            mismatches.append((case, want, have["text"]))
    rendered = sum(w is not None for w, _ in expected)
    report = "\n\n".join(
        f"case: {json.dumps(c, ensure_ascii=False)}\njinja2: {w!r}\ntern:   {h!r}" for c, w, h in mismatches[:3]
    )
    assert not mismatches, f"{len(mismatches)}/{len(cases)} cases differ for {name}:\n{report}"
    # The comparison must mostly be of rendered text, not of errors on both sides.
    assert rendered >= len(cases) // 4, f"only {rendered}/{len(cases)} cases rendered in jinja2"


def test_error_cases_fail_in_both(render_bin, tmp_path):
    """Templates jinja2 rejects at render time are errors in tern too."""
    env = make_env()
    snippets = [
        "{{ raise_exception('bad role') }}",
        "{{ messages[0].content.missing.deeper }}",
        "{{ 'a' + 1 }}",
        "{{ 1 / 0 }}",
        "{{ undefined_name + 1 }}",
        "{% for a, b in [[1, 2, 3]] %}{% endfor %}",
        "{{ range(200000) | length }}",
        "{{ messages | tojson(indent=undefined_name.x) }}",
    ]
    case = {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True, "special_tokens": {}}
    for i, src in enumerate(snippets):
        with pytest.raises(Exception):
            env.from_string(src).render(messages=case["messages"])
        path = tmp_path / f"e{i}.jinja"
        path.write_text(src, encoding="utf-8")
        proc = subprocess.run([render_bin, str(path)], input=json.dumps(case).encode(), capture_output=True, timeout=60)
        assert proc.returncode == 1, f"{src!r} rendered {proc.stdout!r}"
        assert b"chat template line 1, column" in proc.stderr, proc.stderr


# ---- random templates: whitespace control, comments, raw blocks, expressions ----

TEXT = ["a", "b c", " ", "  ", "\t", "\n", "\n\n", "  \n", "\n  ", " \t\n ", "\r\n", "\u00a0", "\u3000", "é", "}", "{ ", "%"]
EXPRESSIONS = [
    "'v'", "x", "xs", "xs[0]", "xs[-1:]", "d", "d.k", "d['k'] ~ 'z'", "u", "none", "1.5", "-3 // 2", "7 % 3",
    "'a' ~ xs | length", "xs | join('-')", "d | tojson", "'%s|%d' % ('a', 2)", "x if xs else 'n'", "u | default('dflt')",
    "xs | map('string') | list", "'  s  ' | trim", "d.items() | list", "(1, 'a')", "xs | sum", "'ÄÖ' | lower",
    "[1, [2, none]] | tojson(indent=1)", "x is defined and u is not defined", "'a b'.split()", "'%.2f' % 2.675",
]


def random_template(rng, depth=0):
    def sign():
        return rng.choice(["", "", "-", "+"])

    def ws():
        return rng.choice([" ", " ", "  ", "\n", " \n "])

    parts = []
    for _ in range(rng.randint(1, 7)):
        kind = rng.randint(0, 9 if depth < 3 else 5)
        if kind <= 2:
            parts.append(rng.choice(TEXT) * rng.randint(1, 2))
        elif kind == 3:
            parts.append("{{" + rng.choice(["", "-"]) + ws() + rng.choice(EXPRESSIONS) + ws() + rng.choice(["", "-"]) + "}}")
        elif kind == 4:
            parts.append("{#" + sign() + ws() + rng.choice(["c", "{{ x }}", "%}"]) + ws() + sign() + "#}")
        elif kind == 5:
            parts.append("{%" + sign() + ws() + "set x = " + rng.choice(EXPRESSIONS) + ws() + sign() + "%}")
        elif kind == 6:
            body = random_template(rng, depth + 1)
            cond = rng.choice(["true", "false", "x", "u", "xs | length > 2"])
            other = ("{%" + sign() + " else " + sign() + "%}" + random_template(rng, depth + 1)) if rng.random() < 0.4 else ""
            parts.append("{%" + sign() + ws() + "if " + cond + ws() + sign() + "%}" + body + other + "{%" + sign() + ws() + "endif" + ws() + sign() + "%}")
        elif kind == 7:
            body = random_template(rng, depth + 1) + rng.choice(["", "{{ loop.index }}", "{{ i }}", "{% if loop.last %}{% break %}{% endif %}"])
            parts.append("{%" + sign() + " for i in " + rng.choice(["xs", "d", "'ab'", "[]", "range(2)"]) + " " + sign() + "%}" + body + "{%" + sign() + " endfor " + sign() + "%}")
        elif kind == 8:
            raw_end = rng.choice(["", "-"])  # jinja2 accepts no `+%}` after raw
            parts.append("{%" + sign() + " raw " + raw_end + "%}" + rng.choice(TEXT) + "{{ x }}" + rng.choice(TEXT) + "{%" + sign() + " endraw " + sign() + "%}")
        else:
            body = random_template(rng, depth + 1)
            parts.append("{%" + sign() + " macro m(p, q=2) " + sign() + "%}" + body + "{{ p }}{{ q }}{%" + sign() + " endmacro " + sign() + "%}{{ m(1) }}" + rng.choice(TEXT) + "{{ m('a', q=[]) }}")
    return "".join(parts)


def test_random_templates_like_jinja2(render_bin):
    """Whitespace control (-, +, trim_blocks, lstrip_blocks), comments, raw and expressions in random templates."""
    env = make_env()
    rng = random.Random(f"{SEED}-random-templates")
    context = {"x": 1, "xs": [1, 2, 3], "d": {"k": "v", "n": [1.5, None]}}
    templates = [random_template(rng) for _ in range(CASES * 5)]
    expected = []
    for source in templates:
        try:
            expected.append(env.from_string(source).render(**context))
        except jinja2.exceptions.TemplateSyntaxError:
            expected.append(None)  # must be a compile error in tern too
        except (jinja2.exceptions.TemplateError, TypeError, ValueError, ZeroDivisionError):
            expected.append(None)
    lines = "".join(json.dumps({"template": t, "context": context}, ensure_ascii=False) + "\n" for t in templates)
    proc = subprocess.run([render_bin, "--templates"], input=lines.encode("utf-8"), capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    got = [json.loads(line) for line in proc.stdout.decode("utf-8").split("\n") if line]
    assert len(got) == len(templates)
    mismatches = [
        (t, w, g.get("text", g.get("error")))
        for t, w, g in zip(templates, expected, got)
        if (w is None and g["ok"]) or (w is not None and (not g["ok"] or g["text"] != w))
    ]
    report = "\n\n".join(f"template: {t!r}\njinja2: {w!r}\ntern:   {h!r}" for t, w, h in mismatches[:3])
    assert not mismatches, f"{len(mismatches)}/{len(templates)} random templates differ:\n{report}"
    assert sum(w is not None for w in expected) > len(templates) // 2
