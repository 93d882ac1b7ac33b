#!/usr/bin/python3
"""The clients applications are built on (the Vercel AI SDK, LangChain, the openai SDK's parse
helper; tests/node/sdk_clients.mjs) against `dspark serve` with a drafter: stories260K (plain chat
format) for structured output, and a tiny random model with Qwen3's real tokenizer and chat
template for tools. Every object a client gets must satisfy its zod schema (checked by zod in the
client), and a forced tool call's arguments the tool's schema.

    test_sdk_clients.py
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

def main():
    tmp = common.tmp_dir()
    bin_ = common.tool("dspark")
    d = common.qwen3_tiny_dir("sdk_qwen")
    dr_s, dr_q = os.path.join(tmp, f"sdk_dr_s_{os.getpid()}"), os.path.join(tmp, f"sdk_dr_q_{os.getpid()}")
    common.run([bin_, "init-drafter", "-m", common.stories_model(), "-o", dr_s, "--seed", "1"])
    common.run([bin_, "init-drafter", "-m", d, "-o", dr_q, "--seed", "1"])
    chk = common.Checker("sdk_clients")
    servers = []
    try:
        servers.append(common.start_server(["-m", common.stories_model(), "-d", dr_s], os.path.join(tmp, "sdk_s.log")))
        servers.append(common.start_server(["-m", d, "-d", dr_q], os.path.join(tmp, "sdk_q.log")))
        p = subprocess.run(["node", os.path.join(common.NODE_DIR, "sdk_clients.mjs"), f"http://127.0.0.1:{servers[0][1]}/v1",
                            f"http://127.0.0.1:{servers[1][1]}/v1"], capture_output=True, text=True, timeout=600)
        print(p.stdout.strip())
        fails = [x for x in (p.stdout + p.stderr).splitlines() if x.startswith("FAIL") or "Error" in x]
        chk.equal("the AI SDK, LangChain and the openai SDK against dspark serve",
                  (p.returncode, fails, "checks passed" in p.stdout), (0, [], True))
    finally:
        for s, _ in servers:
            s.kill()
            s.wait()
        for x in (d, dr_s, dr_q):
            shutil.rmtree(x, ignore_errors=True)
    chk.finish()


if __name__ == "__main__":
    main()
