#!/usr/bin/env python3
"""Generates the chat-template fixtures of tests/test_chat_template.c from the real renderer:
jinja2 configured exactly as transformers configures it (transformers.utils.chat_template_utils:
ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its tojson, its globals),
fed the way tokenizer.apply_chat_template feeds it (messages normalised, special tokens and
keyword arguments as template variables).

Writes, under tests/fixtures/chat/:
  expected.json  the templates of templates/*.jinja (written for these tests, each exercising a
                 group of constructs) rendered over a set of conversations, with and without
                 add_generation_prompt; renderings jinja2 refuses are recorded as errors. Also
                 the one-line templates of snippet_sources.json (semantic corner cases: Python
                 operators, Markup, generators, loop quirks, string formatting), rendered over
                 the "snippets" conversation
  errors.json    templates that must fail: syntax errors, constructs Ember does not support,
                 runtime errors (raise_exception, undefined values, type errors), with what
                 jinja2 does with each
  real.json      only when the shared model data is present (EMBER_SHARED_DATA or
                 ../shared/data): the chat templates of tokenizers/{qwen3,gemma3,llama3}
                 rendered by AutoTokenizer.apply_chat_template(..., tokenize=False). Only the
                 expected outputs and a fingerprint of each template are written, never the
                 template itself.

Run: /opt/refvenv/bin/python scripts/gen_chat_fixtures.py   (jinja2 3.1.6, transformers 5.24)
"""
import json
import os
import pathlib
import sys
import warnings

import jinja2
import transformers
from transformers.utils.chat_template_utils import (_normalize_chat_messages,
                                                    render_jinja_template)

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "chat"
TEMPLATES = OUT / "templates"

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "array", "items": {"type": "integer"}}}}}},
    {"type": "function", "function": {
        "name": "search", "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "exact": {"type": "boolean"}}}}},
]

CONVERSATIONS = {
    "basic": [{"role": "user", "content": "Hello!"}],
    "system": [{"role": "system", "content": "You are a concise assistant."},
               {"role": "user", "content": "What is 2+2?"}],
    "multi": [{"role": "system", "content": "Be brief."},
              {"role": "user", "content": "Name a colour."},
              {"role": "assistant", "content": "Blue."},
              {"role": "user", "content": "Another one?"}],
    "assistant_last": [{"role": "user", "content": "Say hi."},
                       {"role": "assistant", "content": "Hi there!"}],
    "unicode": [{"role": "user", "content": "Grüße aus Köln — naïve café ✓ 😀 שלום مرحبا 中文 ΣΟΦΟΣ straße İstanbul ǅ"},
                {"role": "assistant", "content": "Ünïcödé: ﬁne ŉ 🎉 e\u0301 \u00a0nbsp\u2028sep"},
                {"role": "user", "content": "Ωmega ΑΣ σ"}],
    "jinja_text": [{"role": "user", "content": "Render {{ messages }} and {% if x %}y{% endif %} {# c #} literally"},
                   {"role": "assistant", "content": "{{ '{{' }} is not evaluated {%- raw -%}"},
                   {"role": "user", "content": "{% endraw %}{{ 1 + 1 }}"}],
    "whitespace": [{"role": "user", "content": "  leading and trailing  \n"},
                   {"role": "assistant", "content": "\n\nline1\n\tline2\n"},
                   {"role": "user", "content": "\t"}],
    "empty": [{"role": "user", "content": ""}],
    "reasoning": [{"role": "user", "content": "Solve 2x = 8."},
                  {"role": "assistant", "content": "<think>\nDivide by 2.\n</think>\n\nx = 4"},
                  {"role": "user", "content": "And 3y = 9?"},
                  {"role": "assistant", "content": "y = 3", "reasoning_content": "Divide by 3."},
                  {"role": "user", "content": "Thanks."}],
    "tool_use": [{"role": "system", "content": "You can call tools."},
                 {"role": "user", "content": "Weather in Paris?"},
                 {"role": "assistant", "content": "", "tool_calls": [
                     {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2]}}}]},
                 {"role": "tool", "content": "{\"temp\": 20, \"sky\": \"clear\"}"},
                 {"role": "assistant", "content": "It is 20°C and clear."}],
    "tool_string_args": [{"role": "user", "content": "Search cats"},
                         {"role": "assistant", "content": "Searching.", "tool_calls": [
                             {"type": "function", "function": {"name": "search", "arguments": "{\"query\": \"cats\"}"}}]},
                         {"role": "tool", "content": "3 results"},
                         {"role": "tool", "content": "page 2"},
                         {"role": "user", "content": "<result>ok</result>"}],
    "non_alternating": [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}],
    "content_parts": [{"role": "system", "content": [{"type": "text", "text": "Look carefully."}]},
                      {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " What is this? "}]}],
    "snippets": [{"role": "system", "content": "You are nice."},
                 {"role": "user", "content": "Hi <b>&'\"</b> ünï ☃ 😀"},
                 {"role": "assistant", "content": "Hello {{ x }} {% if %}"},
                 {"role": "user", "content": "Bye"}],
    "null_fields": [{"role": "user", "content": "hi", "name": None},
                    {"role": "assistant", "content": "hello", "tool_calls": None, "reasoning": None}],
}

TOKENS = {"bos_token": "<s>", "eos_token": "</s>"}
EXTRAS = {
    "none": None,
    "tokens": TOKENS,
    "tools": {**TOKENS, "tools": TOOLS},
    "thinking_off": {**TOKENS, "enable_thinking": False},
    "thinking_on": {**TOKENS, "enable_thinking": True},
    "date_tools_in_user": {**TOKENS, "tools": TOOLS, "date_string": "26 Jul 2024", "tools_in_user_message": True},
}

ALL_CHAT = ["basic", "system", "multi", "assistant_last", "unicode", "jinja_text", "whitespace", "empty"]
CASES = {
    "chatml.jinja": [(c, "none") for c in ALL_CHAT + ["null_fields"]],
    "inst.jinja": [(c, "tokens") for c in ["basic", "system", "multi", "assistant_last", "non_alternating", "unicode"]],
    "turns.jinja": [(c, "tokens") for c in ["basic", "system", "multi", "whitespace", "non_alternating", "content_parts"]],
    "reasoning.jinja": [("reasoning", "none"), ("reasoning", "thinking_off"), ("reasoning", "thinking_on"),
                        ("multi", "thinking_off"), ("tool_use", "tools"), ("tool_string_args", "none"),
                        ("jinja_text", "none")],
    "tools_header.jinja": [("system", "tokens"), ("tool_use", "tools"), ("tool_use", "date_tools_in_user"),
                           ("multi", "date_tools_in_user"), ("tool_string_args", "tools")],
    "macros.jinja": [("multi", "none"), ("system", "tools"), ("unicode", "none")],
    "filters.jinja": [("multi", "none"), ("unicode", "none"), ("whitespace", "none")],
    "tests_and_methods.jinja": [("multi", "none"), ("assistant_last", "tools"), ("unicode", "none")],
    "whitespace.jinja": [("multi", "none"), ("basic", "none")],
    "scoping.jinja": [("multi", "none"), ("reasoning", "none"), ("basic", "none")],
    "expressions.jinja": [("multi", "none"), ("basic", "none")],
    "generation.jinja": [("multi", "none"), ("reasoning", "none")],
    "unicode.jinja": [("unicode", "none"), ("jinja_text", "none")],
    "inputs.jinja": [("null_fields", "none"), ("reasoning", "thinking_off"), ("tool_use", "tools"),
                     ("content_parts", "tokens")],
}

# Templates that must fail. `expect` is what Ember must report (status and words of the message);
# the script records what jinja2 does, and checks that it fails too unless the construct is one
# Ember does not support.
ERRORS = [
    # syntax errors
    ("unclosed_if", "{% if true %}x", "format", ["line 1", "endif"]),
    ("unclosed_for", "{% for m in messages %}\n{{ m }}", "format", ["endfor"]),
    ("unknown_tag", "{% frobnicate %}", "format", ["unknown tag 'frobnicate'"]),
    ("nesting_mistake", "{% if x %}{% endfor %}{% endif %}", "format", ["endfor"]),
    ("dangling_operator", "{{ 1 + }}", "format", ["line 1, column 8", "unexpected"]),
    ("empty_print", "{{ }}", "format", ["Expected an expression"]),
    ("bad_char", "{{ 1 ! 2 }}", "format", ["unexpected char '!'"]),
    ("unbalanced", "{{ (1 + 2] }}", "format", ["unexpected ']'"]),
    ("unclosed_comment", "a {# never closed", "format", ["missing end of comment"]),
    ("unclosed_raw", "{% raw %} never closed", "format", ["missing end of raw"]),
    ("unknown_filter", "{{ messages | frobnicate }}", "format", ["No filter named 'frobnicate'"]),
    ("unknown_test", "{{ messages is frobnicated }}", "format", ["No test named 'frobnicated'"]),
    ("break_outside_loop", "{% break %}", "format", ["'break' outside loop"]),
    ("break_in_macro", "{% for x in [1] %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}", "format", ["'continue' outside loop"]),
    ("bad_escape", "{{ '\\x4' }}", "format", ["truncated \\xXX escape"]),
    ("assign_to_literal", "{% set 1 = 2 %}", "format", ["can't assign"]),
    ("default_order", "{% macro m(a=1, b) %}{% endmacro %}", "format", ["non-default argument"]),
    ("chained_tests", "{{ 1 is odd is odd }}", "format", ["cannot chain"]),
    # constructs Ember does not support
    ("include", "{% include 'other.jinja' %}", "unsupported", ["{% include %}"]),
    ("extends", "{% extends 'base.jinja' %}", "unsupported", ["{% extends %}"]),
    ("block", "{% block body %}x{% endblock %}", "unsupported", ["{% block %}"]),
    ("import", "{% import 'macros.jinja' as m %}", "unsupported", ["{% import %}"]),
    ("recursive_loop", "{% for x in [1] recursive %}{{ x }}{% endfor %}", "unsupported", ["recursive"]),
    ("urlize_filter", "{{ 'see https://x.org' | urlize }}", "unsupported", ["'urlize' filter"]),
    ("wordwrap_filter", "{{ messages[0].content | wordwrap(5) }}", "unsupported", ["'wordwrap' filter"]),
    ("str_encode", "{{ 'x'.encode() }}", "unsupported", ["str.encode()"]),
    ("print_generator", "{{ messages | map(attribute='role') }}", "unsupported", ["generator"]),
    ("print_method", "{{ messages[0].items }}", "unsupported", ["printing"]),
    ("named_escape", "{{ '\\N{BULLET}' }}", "unsupported", ["\\N{...}"]),
    ("big_int", "{{ 10 ** 20 }}", "overflow", ["integer overflow"]),
    ("cycler", "{% set c = cycler('a', 'b') %}{{ c.next() }}", "unsupported", ["cycler()"]),
    # runtime errors
    ("raise_exception", "{{ raise_exception('Roles must alternate, got ' ~ messages[0].role) }}", "invalid", ["Roles must alternate, got system", "line 1"]),
    ("undefined_attr_of_undefined", "{{ foo.bar }}", "invalid", ["'foo' is undefined"]),
    ("attr_of_missing_key", "{{ messages[0].nope.deeper }}", "invalid", ["has no attribute 'nope'"]),
    ("index_past_end", "{{ messages[5].role }}", "invalid", ["no element 5"]),
    ("add_str_int", "{{ messages[0].content + 1 }}", "invalid", ["TypeError", "can only concatenate str"]),
    ("add_undefined", "{{ 'a' + nope }}", "invalid", ["'nope' is undefined"]),
    ("zero_division", "{{ messages | length // 0 }}", "invalid", ["ZeroDivisionError"]),
    ("compare_types", "{{ 1 < 'a' }}", "invalid", ["'<' not supported between instances of 'int' and 'str'"]),
    ("not_iterable", "{% for x in 5 %}{% endfor %}", "invalid", ["'int' object is not iterable"]),
    ("unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", "invalid", ["too many values to unpack"]),
    ("list_append", "{% set l = [] %}{{ l.append(1) }}", "invalid", ["SecurityError", "'append'"]),
    ("namespace_underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}", "invalid", ["underscore-prefixed"]),
    ("set_attr_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", "invalid", ["non-namespace"]),
    ("macro_too_many_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "invalid", ["takes not more than 1 argument"]),
    ("macro_unknown_kwarg", "{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", "invalid", ["no keyword argument 'b'"]),
    ("tojson_undefined", "{{ nope | tojson }}", "invalid", ["not JSON serializable"]),
    ("range_too_big", "{{ range(1000000) | length }}", "invalid", ["Range too big"]),
    ("empty_separator", "{{ 'abc'.split('') }}", "invalid", ["empty separator"]),
    ("generator_len", "{{ messages | select | length }}", "invalid", ["has no len()"]),
]


def render(source, messages, agp, extra):
    """What tokenizer.apply_chat_template(..., tokenize=False) returns for this template."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out, _ = render_jinja_template(conversations=[_normalize_chat_messages(messages)],
                                           chat_template=source, add_generation_prompt=agp,
                                           **(extra or {}))
        return {"output": out[0]}
    except Exception as e:  # the template refused this input
        return {"error_type": type(e).__name__, "error": str(e)}


def gen_templates():
    cases = []
    for name, combos in CASES.items():
        source = (TEMPLATES / name).read_text()
        for conv, extra in combos:
            for agp in (False, True):
                r = render(source, CONVERSATIONS[conv], agp, EXTRAS[extra])
                cases.append({"template": name, "conversation": conv, "extra": extra,
                              "add_generation_prompt": agp, **r})
    missing = sorted(p.name for p in TEMPLATES.glob("*.jinja") if p.name not in CASES)
    if missing:
        sys.exit(f"templates without cases: {missing}")
    snippets = []
    for source in json.loads((OUT / "snippet_sources.json").read_text()):
        r = render(source, CONVERSATIONS["snippets"], True, None)
        if "0x7f" in r.get("output", ""):
            sys.exit(f"snippet prints a memory address, its output is not reproducible: {source}")
        snippets.append({"source": source, **r})
    return {"generator": "scripts/gen_chat_fixtures.py", "jinja2": jinja2.__version__,
            "transformers": transformers.__version__, "conversations": CONVERSATIONS,
            "extras": EXTRAS, "cases": cases, "snippets": snippets}


def gen_errors():
    out = []
    for name, source, status, needles in ERRORS:
        r = render(source, CONVERSATIONS["multi"], True, EXTRAS["tokens"])
        if status not in ("unsupported", "overflow") and "error" not in r:
            sys.exit(f"error case {name}: jinja2 renders it ({r['output']!r}); fix the case")
        out.append({"name": name, "source": source, "status": status, "needles": needles,
                    "jinja2": r})
    return {"generator": "scripts/gen_chat_fixtures.py", "conversation": "multi", "extra": "tokens",
            "cases": out}


# Real templates: conversations for the checkpoints of tests/test_chat_template.c (tool-less).
REAL_CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello, who are you?"}],
    "system_user": [{"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "Give me three colours."}],
    "multi_turn": [{"role": "system", "content": "Answer in one word."},
                   {"role": "user", "content": "Capital of France?"},
                   {"role": "assistant", "content": "Paris."},
                   {"role": "user", "content": "And of Italy?"}],
    "no_system_multi": [{"role": "user", "content": "  Hi there  "},
                        {"role": "assistant", "content": "Hello! How can I help?"},
                        {"role": "user", "content": "Tell me a joke about cats 🐱 — s'il vous plaît."}],
    "reasoning": [{"role": "user", "content": "What is 17 * 3?"},
                  {"role": "assistant", "content": "<think>\n17 * 3 = 51\n</think>\n\n51"},
                  {"role": "user", "content": "And 17 * 4?"}],
    "jinja_text": [{"role": "user", "content": "Print {{ x }} and {% if y %} as text."}],
}


def fnv1a64(s):
    h = 0xcbf29ce484222325
    for b in s.encode("utf-8"):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def gen_real(data):
    from transformers import AutoTokenizer
    families = {}
    for fam in ("qwen3", "gemma3", "llama3"):
        d = data / "tokenizers" / fam
        cfg = json.loads((d / "tokenizer_config.json").read_text())
        template = cfg["chat_template"]
        tok = AutoTokenizer.from_pretrained(str(d))
        variants = [None]
        if "enable_thinking" in template:
            variants = [None, {"enable_thinking": False}, {"enable_thinking": True}]
        cases = []
        for conv, msgs in REAL_CONVERSATIONS.items():
            for kwargs in variants:
                for agp in (False, True):
                    try:
                        out = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=agp,
                                                      **(kwargs or {}))
                        r = {"output": out}
                    except Exception as e:
                        r = {"error_type": type(e).__name__, "error": str(e)}
                    cases.append({"conversation": conv, "kwargs": kwargs,
                                  "add_generation_prompt": agp, **r})
        families[fam] = {"template_fnv1a64": fnv1a64(template), "template_chars": len(template),
                         "special_tokens_map": tok.special_tokens_map, "cases": cases}
    return {"generator": "scripts/gen_chat_fixtures.py", "jinja2": jinja2.__version__,
            "transformers": transformers.__version__, "conversations": REAL_CONVERSATIONS,
            "families": families}


def write(name, obj):
    path = OUT / name
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")


def main():
    write("expected.json", gen_templates())
    write("errors.json", gen_errors())
    data = os.environ.get("EMBER_SHARED_DATA")
    data = pathlib.Path(data) if data else ROOT.parent / "shared" / "data"
    if (data / "tokenizers").is_dir():
        write("real.json", gen_real(data))
    else:
        print(f"SKIP real.json: no tokenizers under {data} (set EMBER_SHARED_DATA)")


if __name__ == "__main__":
    main()
