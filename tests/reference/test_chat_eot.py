#!/usr/bin/python3
"""Every front end ends a chat reply at the chat format's end-of-turn token (ds_chat_eot), which the
model (a random tiny Llama with Qwen3's real tokenizer: ChatML, <|im_end|>, and no
generation_config.json, so <|im_end|> is no stop id of the model) would otherwise run past.

logit_bias / --logit-bias puts the end-of-turn token (+100) or an ordinary token first:
  - /v1/chat/completions with <|im_end|> forced: an empty reply, finish_reason "stop", no tokens;
  - the same rendered prompt through /v1/completions (not a chat turn) runs past it: "length";
  - generate --chat and dspark chat with the same bias print an empty reply too;
  - with the bias on an ordinary token instead, the chat reply is generate --chat's text.

    test_chat_eot.py
"""
import http.client
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

def main():
    tmp = common.tmp_dir()
    d = common.qwen3_tiny_dir("chat_eot")
    gen_cfg = os.path.join(d, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)
    eot = json.loads(common.run([common.tool("dspark"), "tokenize", "-m", d, "--no-special", "<|im_end|>"]))
    if len(eot) != 1:
        common.fail(f"<|im_end|> is not one token: {eot}")
    eot = eot[0]
    chk = common.Checker("chat_eot")
    bin_ = common.tool("dspark")

    def generate_chat(bias):
        out = common.run([bin_, "generate", "-m", d, "--chat", "-p", "Hi", "-n", "6", "--json", "--logit-bias", bias])
        return json.loads(out.splitlines()[-1])

    forced = generate_chat(f"{eot}:100")
    chk.equal("generate --chat, end of turn forced: empty reply, no tokens", (forced["text"], forced["tokens"]), ("", []))
    ordinary = generate_chat("400:100")
    chk.equal("generate --chat, an ordinary token forced: it is generated", ordinary["tokens"][:1], [400])
    p = subprocess.run([bin_, "chat", "-m", d, "-n", "6", "--logit-bias", f"{eot}:100"], input="Hi\n", capture_output=True,
                       text=True, timeout=120)
    chk.equal("dspark chat, end of turn forced: an empty reply line", (p.returncode, p.stdout), (0, "\n"))

    srv, port = common.start_server(["-m", d], os.path.join(tmp, f"chat_eot_server_{os.getpid()}.log"))
    try:

        def post(path, body):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            r = c.getresponse()
            out = json.loads(r.read())
            c.close()
            return r.status, out

        msgs = [{"role": "user", "content": "Hi"}]
        st, o = post("/v1/chat/completions", {"messages": msgs, "max_tokens": 6, "temperature": 0,
                                              "logit_bias": {str(eot): 100}})
        chk.equal("/v1/chat/completions, end of turn forced", (st, o["choices"][0]["message"]["content"],
                  o["choices"][0]["finish_reason"], o["usage"]["completion_tokens"]), (200, "", "stop", 0))
        st, o = post("/v1/completions", {"prompt": forced["prompt_ids"], "max_tokens": 6, "temperature": 0,
                                         "logit_bias": {str(eot): 100}})
        chk.equal("/v1/completions (no chat turn) runs past it", (st, o["choices"][0]["finish_reason"],
                  o["usage"]["completion_tokens"]), (200, "length", 6))
        st, o = post("/v1/chat/completions", {"messages": msgs, "max_tokens": 6, "temperature": 0,
                                              "logit_bias": {"400": 100}})
        chk.equal("/v1/chat/completions, an ordinary token forced: generate --chat's text",
                  (st, o["choices"][0]["message"]["content"]), (200, ordinary["text"]))
    finally:
        srv.kill()
        srv.wait()
    shutil.rmtree(d, ignore_errors=True)
    chk.finish()


if __name__ == "__main__":
    main()
