"""dspark serve over real HTTP (driven by tests/cli/test_serve.sh).

Starts servers on free loopback ports (--port 0; the port is read from stderr) and checks, against
`dspark generate` run as a separate process (and the model's known continuation):
  1. greedy completions are byte-identical to `dspark generate` (with and without a drafter);
  2. streamed text concatenates to the non-streamed text (completions and chat); batched prompts and
     n > 1 give one choice per (prompt, i), indexed as OpenAI does; chat content as text parts and
     the developer role; other content parts and tool messages are refused by name; penalties and
     logit_bias give generate's text, logprobs generate's numbers; echo; every field we know but do
     not implement (tools, response_format json, suffix, ...) is a 400 naming it;
  3. concurrent requests are all correct (greedy, and sampled with a seed);
  4. stop strings cut the text (streamed or not) and finish_reason says why;
  5. bad requests get 400/404/405/413 with an OpenAI-style error body, and the server stays up;
  6. metrics add up (tokens, rounds, acceptance by position, verification lengths);
  7. a full queue answers 503; a client that disconnects (streaming or not) frees its slot;
  8. SIGTERM drains: the running stream completes, then the process exits 0.
Every server is killed on exit, whatever happens.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import BIN, FAILS, MODEL, SHARED, TMP, Server, check  # noqa: E402


def generate(prompt, n, *extra):
    out = subprocess.run([BIN, "generate", "-m", MODEL, "-p", prompt, "-n", str(n), "--json", "-t", "1", *extra],
                         capture_output=True, check=True)
    return json.loads(out.stdout)


def stream_text(events, chat):
    if chat:
        return "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    return "".join(e["choices"][0]["text"] for e in events if e["choices"])


def finish_of(events):
    return [e["choices"][0]["finish_reason"] for e in events if e["choices"] and e["choices"][0]["finish_reason"]]


PROMPTS = ["Once upon a time", "The cat sat", "Lily and Tom went to the park", "One day, a little bird",
           "Tim had a big red ball", "The sun was"]
N = 40
REF = {p: generate(p, N) for p in PROMPTS}
SAMPLED = generate("The cat", 32, "--temp", "0.8", "--top-k", "40", "--top-p", "0.95", "--seed", "7")


def check_greedy(srv, prompt, name, stream=False):
    body = {"prompt": prompt, "max_tokens": N, "temperature": 0}
    ref = REF[prompt]
    if stream:
        ev, done = srv.stream("/v1/completions", dict(body, stream_options={"include_usage": True}))
        text, fin, usage = stream_text(ev, False), finish_of(ev), ev[-1].get("usage") if ev else None
        check(done, "%s: no [DONE]" % name)
    else:
        st, o = srv.post("/v1/completions", body)
        if not check(st == 200, "%s: status %d %s" % (name, st, o)):
            return
        text, fin, usage = o["choices"][0]["text"], [o["choices"][0]["finish_reason"]], o["usage"]
    check(text == ref["text"], "%s %r (stream=%s): server %r != generate %r" % (name, prompt, stream, text, ref["text"]))
    check(fin == ["length" if ref["generated_tokens"] == N else "stop"], "%s: finish %s" % (name, fin))
    check(usage == {"prompt_tokens": ref["prompt_tokens"], "completion_tokens": ref["generated_tokens"],
                    "total_tokens": ref["prompt_tokens"] + ref["generated_tokens"],
                    "prompt_tokens_details": {"cached_tokens": 0}}, "%s: usage %s" % (name, usage))


def run_concurrently(fns):
    ts = [threading.Thread(target=f) for f in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)


# ---------------------------------------------------------------------------------------------
# A. Plain decoding (--schedule none), 4 slots.
A = Server("--schedule", "none", "--max-concurrency", "4", "--queue", "32")
st, b = A.request("GET", "/health")
check(st == 200 and json.loads(b)["status"] == "ok", "health %d %s" % (st, b))
st, b = A.request("GET", "/v1/models")
check(st == 200 and json.loads(b)["data"][0]["object"] == "model", "models %d %s" % (st, b))

# 1. The model's known continuation (independent of dspark generate), then identity with generate.
expected = open(os.path.join(SHARED, "models/stories260K/README.md")).read().split("```\n")[1].rstrip("\n")
st, o = A.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 64, "temperature": 0})
check(st == 200 and "Once upon a time" + o["choices"][0]["text"] == expected, "known continuation: %s" % o)
for p in PROMPTS[:3]:
    check_greedy(A, p, "A")
# A prompt given as token ids gives the same text.
st, o = A.post("/v1/completions", {"prompt": REF[PROMPTS[0]]["prompt_ids"], "max_tokens": N, "temperature": 0})
check(st == 200 and o["choices"][0]["text"] == REF[PROMPTS[0]]["text"], "token-id prompt: %s" % o)

st, o = A.post("/v1/completions", {"prompt": [PROMPTS[1]], "max_tokens": N, "temperature": 0, "unknown_field": {"x": 1}})
check(st == 200 and o["choices"][0]["text"] == REF[PROMPTS[1]]["text"], "prompt as [string] + unknown field: %s" % o)
st, o = A.post("/v1/completions", {"prompt": "\u00e9t\u00e9 \ud83d\ude00", "max_tokens": 4, "temperature": 0})
check(st == 200 and o["usage"]["completion_tokens"] == 4, "non-ASCII prompt: %s" % o)

# 2. Streaming equals non-streaming, for completions and chat.
for p in PROMPTS[:2]:
    check_greedy(A, p, "A", stream=True)
chat = {"messages": [{"role": "system", "content": "You tell stories."}, {"role": "user", "content": "Tell me about a dog."}],
        "max_tokens": 24, "temperature": 0}
st, o = A.post("/v1/chat/completions", chat)
check(st == 200 and o["object"] == "chat.completion" and o["choices"][0]["message"]["role"] == "assistant", "chat: %s" % o)
ev, done = A.stream("/v1/chat/completions", chat)
check(done and ev and ev[0]["choices"][0]["delta"].get("role") == "assistant", "chat stream opening: %s" % ev[:1])
check(all(e["object"] == "chat.completion.chunk" for e in ev), "chat chunk objects")
check(stream_text(ev, True) == o["choices"][0]["message"]["content"], "chat stream %r != %r" % (stream_text(ev, True), o["choices"][0]["message"]["content"]))
check(finish_of(ev) == [o["choices"][0]["finish_reason"]], "chat finish %s vs %s" % (finish_of(ev), o["choices"][0]["finish_reason"]))

# 2b. Batched prompts and n > 1: each choice its own sequence, indexed p*n + i as OpenAI does (streamed
#     too); greedy choices equal generate; choice 0 of a seeded request has the request's seed.
two = [PROMPTS[0], PROMPTS[1]]
for body in ({"prompt": two, "n": 2}, {"prompt": [REF[p]["prompt_ids"] for p in two], "n": 2}):
    body = dict(body, max_tokens=N, temperature=0)
    st, o = A.post("/v1/completions", body)
    want = [REF[two[0]]["text"]] * 2 + [REF[two[1]]["text"]] * 2
    check(st == 200 and [c["index"] for c in o["choices"]] == [0, 1, 2, 3] and [c["text"] for c in o["choices"]] == want,
          "batched prompts, n = 2: %s" % o)
    if st == 200:
        pt = sum(REF[p]["prompt_tokens"] for p in two)
        ct = 2 * sum(REF[p]["generated_tokens"] for p in two)
        check(o["usage"] == {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct,
                             "prompt_tokens_details": {"cached_tokens": 0}}, "batch usage %s" % o["usage"])
    ev, done = A.stream("/v1/completions", body)
    got = ["".join(c["text"] for e in ev for c in e["choices"] if c["index"] == i) for i in range(4)]
    fins = [[c["finish_reason"] for e in ev for c in e["choices"] if c["index"] == i and c["finish_reason"]] for i in range(4)]
    check(done and got == want and all(len(f) == 1 for f in fins), "streamed batch: %s %s" % (got, fins))
st, o = A.post("/v1/completions", {"prompt": "The cat", "max_tokens": 32, "temperature": 0.8, "top_k": 40, "top_p": 0.95,
                                   "seed": 7, "n": 3})
texts = [c["text"] for c in o.get("choices", [])]
check(st == 200 and len(texts) == 3 and texts[0] == SAMPLED["text"] and len(set(texts)) > 1, "seeded n = 3: %s" % texts)
# Chat: content as text parts (concatenated) and the developer role (as system) give the plain request's reply.
chat_parts = {"messages": [{"role": "developer", "content": [{"type": "text", "text": "You tell "}, {"type": "text", "text": "stories."}]},
                           {"role": "user", "content": [{"type": "text", "text": "Tell me about a dog."}]}],
              "max_tokens": 24, "temperature": 0}
st2, o2 = A.post("/v1/chat/completions", chat_parts)
st, o = A.post("/v1/chat/completions", chat)
check(st == 200 and st2 == 200 and o2["choices"][0]["message"] == o["choices"][0]["message"], "content parts + developer: %s vs %s" % (o2, o))
st, o = A.post("/v1/chat/completions", dict(chat, n=2))
check(st == 200 and [c["index"] for c in o["choices"]] == [0, 1] and o["choices"][0]["message"] == o["choices"][1]["message"],
      "chat n = 2 (greedy): %s" % o)

# 2c. Penalties and logit bias are part of the processed distribution (the text of generate with the
#     same options); logprobs are generate's (the target's processed distribution); echo.
pen = {"presence_penalty": 0.5, "frequency_penalty": 0.8, "logit_bias": {"370": -100, "268": 2}}
pen_args = ["--presence-penalty", "0.5", "--frequency-penalty", "0.8", "--logit-bias", "370:-100", "--logit-bias", "268:2"]
for temp in (0, 1):
    ref_pen = generate("Tom saw a", 24, "--temp", str(temp), "--seed", "5", "--logprobs", "2", *pen_args)
    st, o = A.post("/v1/completions", dict(pen, prompt="Tom saw a", max_tokens=24, temperature=temp, seed=5, logprobs=2))
    c = o.get("choices", [{}])[0]
    lp = c.get("logprobs") or {}
    check(st == 200 and c.get("text") == ref_pen["text"], "penalties + bias at T=%d: %s vs %r" % (temp, o, ref_pen["text"]))
    check(st == 200 and len(lp.get("token_logprobs", [])) == len(ref_pen["logprobs"]) and
          all(abs(a - b[0]) < 1e-5 for a, b in zip(lp["token_logprobs"], ref_pen["logprobs"])),
          "logprobs vs generate --logprobs at T=%d: %s" % (temp, lp))
    check(st == 200 and "".join(lp.get("tokens", [])) == c["text"] and lp["text_offset"][0] == 0 and
          all(len(t) == 2 for t in lp["top_logprobs"]), "completions logprobs shape: %s" % lp)
st, o = A.post("/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=3))
content = (o.get("choices", [{}])[0].get("logprobs") or {}).get("content", [])
check(st == 200 and len(content) == o["usage"]["completion_tokens"] and all(
    set(t) == {"token", "logprob", "bytes", "top_logprobs"} and len(t["top_logprobs"]) == 3 and
    t["top_logprobs"][0]["logprob"] >= t["logprob"] - 1e-6 for t in content), "chat logprobs: %s" % o)
ev, done = A.stream("/v1/chat/completions", dict(chat, logprobs=True, top_logprobs=1))
streamed = [t for e in ev for c in e["choices"] for t in (c.get("logprobs") or {}).get("content", [])]
check(done and [t["token"] for t in streamed] == [t["token"] for t in content], "streamed chat logprobs %s" % streamed)
st, o = A.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": N, "temperature": 0, "echo": True})
check(st == 200 and o["choices"][0]["text"] == "Once upon a time" + REF["Once upon a time"]["text"], "echo: %s" % o)
ev, done = A.stream("/v1/completions", {"prompt": "Once upon a time", "max_tokens": N, "temperature": 0, "echo": True})
check(stream_text(ev, False) == "Once upon a time" + REF["Once upon a time"]["text"], "streamed echo: %r" % stream_text(ev, False))

# 3. Concurrent requests (more than the slots): greedy ones, streamed or not, and a seeded sampled one.
fns = [lambda p=p, s=s: check_greedy(A, p, "concurrent", stream=s) for p in PROMPTS for s in (False, True)]
sampled = {}


def sample():
    sampled["r"] = A.post("/v1/completions", {"prompt": "The cat", "max_tokens": 32, "temperature": 0.8, "top_k": 40, "top_p": 0.95, "seed": 7})


run_concurrently(fns + [sample])
st, o = sampled["r"]
check(st == 200 and o["choices"][0]["text"] == SAMPLED["text"], "sampled with seed 7 in a batch: %r != generate %r" % (o, SAMPLED["text"]))

# 4. Stop strings.
ref = REF["Once upon a time"]["text"]
stop = " %s %s" % tuple(ref.split(" ")[3:5])  # two words from the middle of the text: several tokens
want = ref[:ref.index(stop)]
for stops in (stop, ["zzzz", stop]):
    st, o = A.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": N, "temperature": 0, "stop": stops})
    check(st == 200 and o["choices"][0]["text"] == want and o["choices"][0]["finish_reason"] == "stop", "stop %r: %s (want %r)" % (stops, o, want))
    ev, done = A.stream("/v1/completions", {"prompt": "Once upon a time", "max_tokens": N, "temperature": 0, "stop": stops})
    check(stream_text(ev, False) == want and finish_of(ev) == ["stop"], "streamed stop %r: %r" % (stops, stream_text(ev, False)))
    check(all(stop not in e["choices"][0]["text"] for e in ev), "a chunk carries the stop string")

# 5. Bad requests: status, and an error body naming the problem.
bad = [
    (b'{"prompt": "x", ', 400, None), (b'[1, 2]', 400, None), (b'', 400, None),
    ({"prompt": "x", "temperature": 3}, 400, "temperature"), ({"prompt": "x", "top_p": 0}, 400, "top_p"),
    ({"prompt": "x", "top_k": -1}, 400, "top_k"), ({"prompt": "x", "min_p": 2}, 400, "min_p"),
    ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"), ({"prompt": "x", "max_tokens": 100000}, 400, "max_tokens"),
    ({"prompt": "x", "n": 65}, 400, "n"), ({"prompt": "x", "n": 0}, 400, "n"), ({"prompt": ["x"] * 33, "n": 2}, 400, "n"),
    ({"prompt": "x", "stream": "yes"}, 400, "stream"), ({"max_tokens": 4}, 400, "prompt"),
    ({"prompt": 5}, 400, "prompt"), ({"prompt": [99999]}, 400, "prompt"), ({"prompt": ["a", [1, 2]]}, 400, "prompt"),
    ({"prompt": [[]]}, 400, "prompt"),
    ({"prompt": "x", "stop": [1]}, 400, "stop"), ({"prompt": "x", "temperature": "hot"}, 400, "temperature"),
    (b'{"prompt": "bad \xff byte"}', 400, "prompt"), (b'{"prompt": "x", "stop": "\xc3"}', 400, "stop"),
    (b'{"prompt": "' + b"a" * (2 << 20) + b'"}', 413, None),
]
for body, want_st, param in bad:
    raw = body if isinstance(body, bytes) else None
    st, o = A.post("/v1/completions", body if raw is None else None, raw=raw)
    err = o.get("error", {}) if isinstance(o, dict) else {}
    check(st == want_st and isinstance(err.get("message"), str) and err["message"] and err.get("type") == "invalid_request_error",
          "bad request %r: %d %s" % (body if raw is None else raw[:40], st, o))
    if param:
        check(err.get("param") == param, "bad request %r: param %s" % (body, err.get("param")))
# Fields OpenAI defines that the server does not serve: a 400 naming each, never silently ignored.
refused = [
    ("/v1/completions", {"prompt": "x", "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "not supported on completions"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools", "needs a string 'name'"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]}, "functions", "deprecated form"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}, "tool_choice", "no 'tools' are given"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tool_choice": "required",
                              "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "need a model with a chat template"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "need a model with a chat template"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}},
     "response_format", "type 'xml' is not supported"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema":
                                                  {"type": "string", "pattern": "a+"}}}},
     "response_format", "keyword 'pattern' is not supported"),
    ("/v1/completions", {"prompt": "x", "json_schema": {"type": "object", "patternProperties": {}}},
     "json_schema", "keyword 'patternProperties' is not supported"),
    ("/v1/completions", {"prompt": "x", "grammar": "root ::= \"a\"\nitem ::= [a-"}, "grammar",
     "grammar 2:10: unterminated character class"),
    ("/v1/completions", {"prompt": "x", "grammar": "root ::= expr\nexpr ::= expr \"+\" | \"1\""}, "grammar",
     "rule 'expr' is left-recursive"),
    ("/v1/completions", {"prompt": "x", "grammar": "root ::= \"a\"", "json_schema": {}}, "grammar", "give one of"),
    ("/v1/completions", {"prompt": "x", "suffix": "end"}, "suffix", "no insertion"),
    ("/v1/completions", {"prompt": "x", "best_of": 2}, "best_of", "other than 1"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "audio": {"voice": "a"}}, "audio", "text only"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "modalities": ["text", "audio"]}, "modalities", "not supported"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "prediction": {"type": "content"}}, "prediction", "not supported"),
    ("/v1/completions", {"prompt": "x", "logprobs": 21}, "logprobs", "[0, 20]"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs", "needs 'logprobs': true"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": 1}, "logprobs", "must be a boolean"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"abc": 1}}, "logit_bias", "keys must be token ids"),
    ("/v1/completions", {"prompt": "x", "logit_bias": {"5": 101}}, "logit_bias", "[-100, 100]"),
    ("/v1/completions", {"prompt": "x", "presence_penalty": 3}, "presence_penalty", "[-2, 2]"),
    ("/v1/completions", {"prompt": "x", "frequency_penalty": "a"}, "frequency_penalty", "must be a number"),
]
for path, body, param, msg in refused:
    st, o = A.post(path, body)
    err = o.get("error", {}) if isinstance(o, dict) else {}
    check(st == 400 and err.get("param") == param and msg in err.get("message", ""), "refused %s %r: %d %s" % (path, body, st, o))
for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tool_choice": "none",
                                             "response_format": {"type": "text"}, "max_tokens": 2}),
                   ("/v1/completions", {"prompt": "x", "suffix": "", "best_of": 1, "max_tokens": 2})):
    st, o = A.post(path, body)
    check(st == 200, "harmless values of those fields are accepted: %d %s" % (st, o))
# Constrained output: response_format json_schema / json_object, llama-server's json_schema and grammar.
schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "n": {"type": "integer"},
                                           "ok": {"type": "boolean"}}, "required": ["name", "n", "ok"]}
for path, body, check_value in (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 200, "seed": 3,
                                  "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}},
         lambda v: isinstance(v, dict) and list(v) == ["name", "n", "ok"] and len(v["name"]) <= 8 and type(v["n"]) is int
         and type(v["ok"]) is bool),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 300, "seed": 4,
                                  "response_format": {"type": "json_object"}}, "object"),
        ("/v1/completions", {"prompt": "Once", "max_tokens": 200, "temperature": 0, "json_schema": {"enum": ["cat", 7, None]}},
         lambda v: v in ("cat", 7, None)),
        ("/v1/completions", {"prompt": "Once", "max_tokens": 50, "temperature": 1, "seed": 1,
                             "grammar": 'root ::= [A-Z] [a-z]{1,5} ("," [A-Z] [a-z]{1,5})? "."'}, None)):
    st, o = A.post(path, body)
    c = o.get("choices", [{}])[0] if st == 200 else {}
    text = c.get("message", {}).get("content") if "messages" in body else c.get("text")
    if check_value == "object":  # unbounded strings: a cut output is a prefix of an object
        check(st == 200 and (text or "").startswith("{"), "json_object: %d %s" % (st, o))
        if c.get("finish_reason") == "stop":
            check(isinstance(json.loads(text), dict), "json_object output %r" % text)
        continue
    check(st == 200 and c.get("finish_reason") == "stop", "constrained %s: %d %s" % (path, st, o))
    if check_value:
        try:
            value = json.loads(text)
        except (TypeError, ValueError):
            value = check
        check(value is not check and check_value(value), "constrained %s: %r does not match %r" % (path, text, body))
    else:
        check(re.fullmatch(r"[A-Z][a-z]{1,5}(,[A-Z][a-z]{1,5})?\.", text or "") is not None, "grammar output %r" % text)
for body, param in [({"messages": "hi"}, "messages"), ({"messages": [{"role": "user"}]}, "messages"),
                    ({"prompt": "x"}, "messages"), ({"messages": [{"role": "user", "content": "hi"}], "n": 0}, "n")]:
    st, o = A.post("/v1/chat/completions", body)
    check(st == 400 and o.get("error", {}).get("param") == param, "bad chat %r: %d %s" % (body, st, o))
# Content parts other than text, and tool messages, are refused by name.
for content, err_want in (([{"type": "image_url", "image_url": {"url": "http://x/y.png"}}], "part type 'image_url' is not supported"),
                      ([{"type": "text"}], "a text part needs a string 'text'"), (5, "must be a string or an array of text parts")):
    st, o = A.post("/v1/chat/completions", {"messages": [{"role": "user", "content": content}]})
    check(st == 400 and err_want in o.get("error", {}).get("message", "") and o["error"].get("param") == "messages",
          "content %r: %d %s" % (content, st, o))
st, o = A.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42", "tool_call_id": "a"}]})
# (stories260K has no chat template: its built-in transcript knows no tool role)
check(st == 400 and "unknown role 'tool'" in o.get("error", {}).get("message", ""), "tool message: %d %s" % (st, o))
st, b = A.request("GET", "/v1/completions")
check(st == 405 and json.loads(b)["error"]["message"], "GET /v1/completions: %d" % st)
st, b = A.request("GET", "/v2/nothing")
check(st == 404 and json.loads(b)["error"]["message"], "GET /v2/nothing: %d" % st)
check_greedy(A, PROMPTS[3], "after bad requests")
m = A.metrics()
check(m.get("dspark_requests_invalid_total", 0) >= len(bad) + len(refused) + 4, "requests_invalid_total %s" % m.get("dspark_requests_invalid_total"))
check(m.get("dspark_active_requests") == 0 and m.get("dspark_queue_depth") == 0, "idle gauges %s" % m)
check(A.stop() == 0, "server A: exit status after SIGTERM")

# ---------------------------------------------------------------------------------------------
# B. A fresh (untrained) drafter, every slot verified (--schedule fixed): still lossless.
subprocess.run([BIN, "init-drafter", "-m", MODEL, "-o", os.path.join(TMP, "drafter"), "--seed", "3"], check=True, capture_output=True)
for sched in ("fixed", "auto"):
    B = Server("-d", os.path.join(TMP, "drafter"), "--schedule", sched, "--max-concurrency", "3")
    run_concurrently([lambda p=p, s=s: check_greedy(B, p, "drafter " + sched, stream=s) for p in PROMPTS[:4] for s in (False, True)])
    m = B.metrics()
    total = sum(REF[p]["generated_tokens"] for p in PROMPTS[:4]) * 2
    check(m["dspark_completion_tokens_total"] == total, "%s: completion_tokens_total %s != %d" % (sched, m["dspark_completion_tokens_total"], total))
    check(m['dspark_requests_finished_total{reason="length"}'] + m['dspark_requests_finished_total{reason="stop"}'] == 8, "%s: finished counts" % sched)
    ells = {k: v for k, v in m.items() if k.startswith("dspark_verify_length_total")}
    check(sum(ells.values()) == m["dspark_verify_rounds_total"], "%s: ell histogram %s sums to rounds %s" % (sched, ells, m["dspark_verify_rounds_total"]))
    check(sum(int(re.search(r'"(\d+)"', k).group(1)) * v for k, v in ells.items()) == m["dspark_drafted_tokens_total"], "%s: sum of ell != drafted" % sched)
    check(abs(m["dspark_tau"] - (m["dspark_accepted_tokens_total"] + m["dspark_verify_rounds_total"]) / m["dspark_verify_rounds_total"]) < 1e-9, "%s: tau" % sched)
    if sched == "fixed":
        check(m["dspark_drafted_tokens_total"] > 0 and 'dspark_tried_by_position_total{position="1"}' in m, "fixed: nothing drafted %s" % m)
        check(m['dspark_tried_by_position_total{position="1"}'] >= m.get('dspark_accepted_by_position_total{position="1"}', -1) >= 0, "position 1 counts")
    check(B.stop() == 0, "server B (%s): exit status" % sched)

# ---------------------------------------------------------------------------------------------
# C. A slow target (40 ms per round), one slot, no queue: 503, disconnects, drain.
C = Server("--schedule", "none", "--max-concurrency", "1", "--queue", "0", "--step-delay-ms", "40")
LONG = ("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s")


def raw_request(body):
    s = socket.create_connection(("127.0.0.1", C.port), timeout=30)
    b = json.dumps(body)
    s.sendall((LONG % (len(b), b)).encode())
    return s


def read_until(s, marker, count=1):
    buf = b""
    while buf.count(marker) < count:
        d = s.recv(4096)
        if not d:
            break
        buf += d
    return buf


def wait_metric(name, value, timeout=10):
    t = time.time() + timeout
    while time.time() < t:
        if C.metrics().get(name) == value:
            return True
        time.sleep(0.05)
    return False


# Streams at one token per round, so text really goes out piece by piece: the pieces still add up,
# and no piece of a stop string leaks before the stop is recognised.
ev, done = C.stream("/v1/completions", {"prompt": "Once upon a time", "max_tokens": N, "temperature": 0})
check(done and len(ev) > N // 2 and stream_text(ev, False) == REF["Once upon a time"]["text"], "slow stream: %d events, %r" % (len(ev), stream_text(ev, False)))
ev, done = C.stream("/v1/completions", {"prompt": "Once upon a time", "max_tokens": N, "temperature": 0, "stop": stop})
check(len(ev) > 3 and stream_text(ev, False) == want and finish_of(ev) == ["stop"], "slow streamed stop %r: %r" % (stop, stream_text(ev, False)))

# A stream of 400 tokens (16 s) holds the only slot: another request gets 503 with a body.
s1 = raw_request({"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "stream": True})
read_until(s1, b"data: ", 2)
st, o = C.post("/v1/completions", {"prompt": "The cat", "max_tokens": 4})
check(st == 503 and o.get("error", {}).get("message"), "full queue: %d %s" % (st, o))
# The client leaves mid-stream: its slot is freed long before its 400 tokens would be done.
t0 = time.time()
s1.close()
check(wait_metric('dspark_requests_finished_total{reason="cancelled"}', 1), "streaming disconnect not cancelled")
st, o = C.post("/v1/completions", {"prompt": "The cat", "max_tokens": 4, "temperature": 0})
check(st == 200 and time.time() - t0 < 10, "after a streaming disconnect: %d in %.1f s" % (st, time.time() - t0))
check(C.metrics()["dspark_completion_tokens_total"] < 300, "the cancelled stream kept generating")
# The same for a client that leaves before a non-streamed answer.
s2 = raw_request({"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0})
time.sleep(0.3)
s2.close()
t0 = time.time()
check(wait_metric('dspark_requests_finished_total{reason="cancelled"}', 2), "non-streamed disconnect not cancelled")
st, o = C.post("/v1/completions", {"prompt": "The cat", "max_tokens": 4, "temperature": 0})
check(st == 200 and time.time() - t0 < 10, "after a non-streamed disconnect: %d in %.1f s" % (st, time.time() - t0))
# SIGTERM while a stream runs: new requests are refused, the stream completes, exit 0.
s3 = raw_request({"prompt": "Once upon a time", "max_tokens": 60, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}})
read_until(s3, b"data: ", 2)
C.p.send_signal(signal.SIGTERM)
time.sleep(0.2)
try:
    st, o = C.post("/v1/completions", {"prompt": "The cat", "max_tokens": 4})
    check(st == 503, "request while draining: %d" % st)
except OSError:
    pass  # already closed: also a refusal
rest = read_until(s3, b"data: [DONE]")
s3.close()
usage = [json.loads(l[6:])["usage"] for l in rest.split(b"\n") if l.startswith(b"data: {") and b'"usage":{' in l]
check(usage and usage[-1]["completion_tokens"] == 60, "drained stream incomplete: %r" % rest[-300:])
try:
    rc = C.p.wait(20)
except subprocess.TimeoutExpired:
    rc = None
check(rc == 0, "server C exit status after SIGTERM: %s" % rc)

print("serve: %d failures" % len(FAILS) if FAILS else "serve: all checks passed")
sys.exit(1 if FAILS else 0)
