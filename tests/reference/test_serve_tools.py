#!/usr/bin/python3
"""dspark serve with a templated model (a random tiny Llama with Qwen3's real tokenizer and chat
template) against jinja2 run as transformers runs it (test_chat_template.make_env):
  - POST /apply-template renders OpenAI-shaped history (system, user, an assistant's tool_calls
    with arguments as a JSON string, tool results, tools, chat_template_kwargs enable_thinking both
    ways, add_generation_prompt both ways) byte-identical to jinja2 given what vLLM / llama-server
    give templates (function.arguments parsed into a mapping);
  - the chat completion's prompt is that rendering (usage.prompt_tokens = the tokens of the
    /apply-template text);
  - tools offered, the model forced to emit "<tool_call>" tokens (logit_bias) that never form a
    call: the text stays content ("stop"/"length", no tool_calls), and the stream (content held
    back while it could start a call) concatenates to the same content;
  - tool_choice "required" and a named function are constrained by the grammar engine: the reply
    is a call in the template's syntax (Qwen3: <tool_call> JSON </tool_call>) whose arguments
    validate against the tool's parameters, returned as tool_calls with finish_reason
    "tool_calls" (greedy and sampled, streamed and not); "none" renders without tools;
  - the openai npm SDK sends the same shapes and reads the replies (tests/node/tools_client.mjs);
  - Gemma 4's template and tool-call syntax (the same tiny Llama with Gemma 3's real tokenizer and
    Gemma 4's chat template from llama.cpp's models/templates): /apply-template equals jinja2, and a
    named or required tool_choice makes the model write "<|tool_call>call:NAME{key:value}<tool_call|>"
    in Gemma 4's value syntax, returned as tool_calls (name offered, keys its parameters', the
    arguments a JSON object), streamed and not.

    test_serve_tools.py
"""
import http.client
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import test_chat_template as tct  # noqa: E402

NODE_DIR = common.NODE_DIR

HISTORY = [
    {"role": "system", "content": "You can call tools."},
    {"role": "user", "content": "Weather in Paris? Ünïcødé ✓"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18}"},
    {"role": "assistant", "content": "18°C."},
    {"role": "user", "content": [{"type": "text", "text": "And "}, {"type": "text", "text": "Rome?"}]},
]


def as_template_sees(msgs):
    """What the server hands the template: text parts joined, null content as "", tool-call arguments as mappings."""
    out = []
    for m in msgs:
        m = json.loads(json.dumps(m))
        if m.get("content") is None:
            m["content"] = ""
        if isinstance(m.get("content"), list):
            m["content"] = "".join(p["text"] for p in m["content"])
        for tc in m.get("tool_calls", []):
            tc["function"]["arguments"] = json.loads(tc["function"]["arguments"])
        out.append(m)
    return out


def post_to(port):
    def post(path, body, stream=False):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        raw = r.read().decode()
        c.close()
        if stream:
            return r.status, [json.loads(x[6:]) for x in raw.split("\n\n") if x.startswith("data: {")]
        return r.status, json.loads(raw)
    return post


def check_forced(chk, post, prefix, forced, max_tokens, valid):
    """Each (label, request fields) of `forced` (a tool_choice that forces a call): one call and
    finish_reason "tool_calls", valid(name, arguments), a named choice calling "add"; streamed, the same
    call."""
    for label, extra in forced:
        fb = dict({"messages": HISTORY, "tools": tct.TOOLS, "max_tokens": max_tokens, "parallel_tool_calls": False}, **extra)
        st, o = post("/v1/chat/completions", fb)
        ch = o["choices"][0] if st == 200 else {}
        calls = ch.get("message", {}).get("tool_calls") or []
        ok = st == 200 and ch.get("finish_reason") == "tool_calls" and len(calls) == 1
        chk.equal(f"{prefix}tool_choice {label}: one call, finish_reason tool_calls ({st}, {ch.get('finish_reason')}, {calls})",
                  ok, True)
        if not ok:
            continue
        name, args = calls[0]["function"]["name"], json.loads(calls[0]["function"]["arguments"])
        chk.equal(f"{prefix}tool_choice {label}: {name}({args}) validates",
                  (isinstance(args, dict) and valid(name, args), label.startswith("named") <= (name == "add")), (True, True))
        st, chunks = post("/v1/chat/completions", dict(fb, stream=True), stream=True)
        deltas = [tc for c in chunks if c.get("choices") for tc in c["choices"][0]["delta"].get("tool_calls") or []]
        s_args = "".join(tc.get("function", {}).get("arguments") or "" for tc in deltas)
        chk.equal(f"{prefix}tool_choice {label}, streamed: the same call",
                  (st, deltas[0]["function"]["name"] if deltas else None, json.loads(s_args) if s_args else None,
                   chunks[-1]["choices"][0]["finish_reason"] if chunks else None), (200, name, args, "tool_calls"))


def check_gemma4(chk, tmp):
    tokdir = os.path.join(NODE_DIR, "node_modules", "@lenml", "tokenizer-gemma3", "models")
    d = os.path.join(tmp, f"serve_tools_gemma4_{os.getpid()}")
    common.run(["/usr/bin/python3", os.path.join(common.HERE, "make_hf_llama.py"), d, "--dim", "32", "--layers", "1",
                "--heads", "2", "--kv-heads", "1", "--ffn", "64", "--vocab", "262145", "--tied", "--dtype", "bf16"])
    shutil.copy(os.path.join(tokdir, "tokenizer.json"), d)
    cfg = json.load(open(os.path.join(tokdir, "tokenizer_config.json")))
    with open(os.path.join(common.REPO, "tests", "fixtures", "templates", "google-gemma-4-31B-it.jinja")) as f:
        cfg["chat_template"] = f.read()
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)
    tmpl = tct.make_env().from_string(cfg["chat_template"])
    def typed(name, args):  # each value of its property's type (number; string; the unit's enum)
        if name == "add":
            return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in args.values())
        return isinstance(args.get("city", ""), str) and args.get("unit", "celsius") in ("celsius", "fahrenheit")
    props = {t["function"]["name"]: set(t["function"]["parameters"]["properties"]) for t in tct.TOOLS}
    srv, port = common.start_server(["-m", d], os.path.join(tmp, f"serve_tools_gemma4_{os.getpid()}.log"))
    try:
        post = post_to(port)
        st, o = post("/apply-template", {"messages": HISTORY, "tools": tct.TOOLS})
        want = tmpl.render(messages=as_template_sees(HISTORY), tools=tct.TOOLS, documents=None, add_generation_prompt=True,
                           bos_token=cfg.get("bos_token"), eos_token=cfg.get("eos_token"))
        chk.equal("gemma4 /apply-template with tools", (st, o.get("prompt")), (200, want))
        forced = [("named add, greedy", {"tool_choice": {"type": "function", "function": {"name": "add"}}, "temperature": 0}),
                  ("required, sampled", {"tool_choice": "required", "temperature": 1.0, "seed": 5})]
        check_forced(chk, post, "gemma4 ", forced, 300,
                     lambda name, args: name in props and set(args) <= props[name] and typed(name, args))
    finally:
        srv.kill()
        srv.wait()
    shutil.rmtree(d, ignore_errors=True)


def main():
    tmp = common.tmp_dir()
    d = common.qwen3_tiny_dir("serve_tools")
    cfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
    tmpl = tct.make_env().from_string(cfg["chat_template"])
    chk = common.Checker("serve_tools")
    bin_ = common.tool("dspark")
    tool_call = json.loads(common.run([bin_, "tokenize", "-m", d, "--no-special", "<tool_call>"]))
    if len(tool_call) != 1:
        common.fail(f"<tool_call> is not one token: {tool_call}")
    srv, port = common.start_server(["-m", d], os.path.join(tmp, f"serve_tools_{os.getpid()}.log"))
    try:
        post = post_to(port)
        for kw in ({}, {"enable_thinking": False}, {"enable_thinking": True}):
            for gen in (True, False):
                body = {"messages": HISTORY, "tools": tct.TOOLS, "add_generation_prompt": gen}
                if kw:
                    body["chat_template_kwargs"] = kw
                st, o = post("/apply-template", body)
                want = tmpl.render(messages=as_template_sees(HISTORY), tools=tct.TOOLS, documents=None,
                                   add_generation_prompt=gen, eos_token=cfg.get("eos_token"), **kw)
                chk.equal(f"/apply-template {kw} gen={gen}", (st, o.get("prompt")), (200, want))
        st, o = post("/apply-template", {"messages": HISTORY, "tools": tct.TOOLS, "tool_choice": "none"})
        want_none = tmpl.render(messages=as_template_sees(HISTORY), tools=None, documents=None, add_generation_prompt=True,
                                eos_token=cfg.get("eos_token"))
        chk.equal("/apply-template, tool_choice none: no tools offered", (st, o.get("prompt")), (200, want_none))
        st, o = post("/apply-template", {"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": 1})
        chk.equal("/apply-template, a bad add_generation_prompt", (st, o.get("error", {}).get("param")), (400, "add_generation_prompt"))

        prompt = post("/apply-template", {"messages": HISTORY, "tools": tct.TOOLS})[1]["prompt"]
        n_prompt = len(json.loads(common.run([bin_, "tokenize", "-m", d, "--no-special", prompt])))
        body = {"messages": HISTORY, "tools": tct.TOOLS, "tool_choice": "auto", "max_tokens": 5, "temperature": 0,
                "logit_bias": {str(tool_call[0]): 100}}
        st, o = post("/v1/chat/completions", body)
        ch = o["choices"][0] if st == 200 else {}
        chk.equal("chat with tools: the prompt is the template's rendering", (st, o.get("usage", {}).get("prompt_tokens")), (200, n_prompt))
        chk.equal("chat with tools: '<tool_call>' x5 is no call, it stays content",
                  (ch.get("message", {}).get("content"), ch.get("message", {}).get("tool_calls"), ch.get("finish_reason")),
                  ("<tool_call>" * 5, None, "length"))
        st, chunks = post("/v1/chat/completions", dict(body, stream=True), stream=True)
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
        chk.equal("chat with tools, streamed: the same content", (st, text, chunks[-1]["choices"][0]["finish_reason"]),
                  (200, "<tool_call>" * 5, "length"))
        chk.equal("chat with tools, streamed: the first delta has the role", chunks[0]["choices"][0]["delta"].get("role"), "assistant")
        # Forced calls: the grammar makes the random model emit a call whose arguments validate.
        def valid_args(name, args):
            if name == "add":
                return set(args) == {"a", "b"} and all(isinstance(args[k], (int, float)) for k in args)
            return isinstance(args.get("city"), str) and set(args) <= {"city", "unit"} and \
                args.get("unit", "celsius") in ("celsius", "fahrenheit")
        forced = [("named add, greedy", {"tool_choice": {"type": "function", "function": {"name": "add"}}, "temperature": 0}),
                  ("required, sampled", {"tool_choice": "required", "temperature": 1.0, "seed": 3}),
                  ("required, sampled, seed 11", {"tool_choice": "required", "temperature": 1.0, "seed": 11})]
        check_forced(chk, post, "", forced, 400, lambda name, args: name in ("add", "get_weather") and valid_args(name, args))
        st, o = post("/v1/chat/completions", dict(body, tool_choice="required", grammar='root ::= "x"'))
        chk.equal("tool_choice required with a grammar: a 400", (st, o.get("error", {}).get("param")), (400, "tool_choice"))
        st, o = post("/v1/chat/completions", dict(body, tool_choice={"type": "function", "function": {"name": "nope"}}))
        chk.equal("tool_choice naming an unknown function: a 400", (st, o.get("error", {}).get("param")), (400, "tool_choice"))
        st, o = post("/v1/chat/completions", {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{bad"}}]}]})
        chk.equal("tool_calls with arguments that are not JSON: a 400", (st, o.get("error", {}).get("param")), (400, "messages"))
        # The openai npm SDK with the same request shapes (tests/node/tools_client.mjs).
        p = subprocess.run(["node", os.path.join(NODE_DIR, "tools_client.mjs"), f"http://127.0.0.1:{port}/v1", str(tool_call[0])],
                           capture_output=True, text=True, timeout=120)
        fails = [x for x in (p.stdout + p.stderr).splitlines() if x.startswith("FAIL") or "Error" in x]
        chk.equal("the openai SDK with tools", (p.returncode, fails, "checks passed" in p.stdout), (0, [], True))
    finally:
        srv.kill()
        srv.wait()
    shutil.rmtree(d, ignore_errors=True)
    check_gemma4(chk, tmp)
    chk.finish()


if __name__ == "__main__":
    main()
