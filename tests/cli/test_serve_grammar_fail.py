"""A grammar the matcher cannot follow (too ambiguous: b* b* with b recursive) fails only its own
request, with a 400 naming the problem, streamed or not; requests in the same rounds finish as they
would alone (before, the engine's round failed and every request in it got a 500). Run by
test_serve_grammar_fail.sh."""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_util import Server, check, FAILS  # noqa: E402

AMBIGUOUS = 'root ::= "a" b* b*\nb ::= root | "a" | "aa"'
PLAIN = {"prompt": "Once upon a time", "max_tokens": 48, "temperature": 0}


def main():
    s = Server()
    st, alone = s.post("/v1/completions", PLAIN)
    check(st == 200, "plain request alone: %d %s" % (st, alone))

    results = {}

    def bad():
        results["bad"] = s.post("/v1/completions", {"prompt": "x", "max_tokens": 64, "grammar": AMBIGUOUS})

    def good():
        results["good"] = s.post("/v1/completions", PLAIN)

    threads = [threading.Thread(target=good), threading.Thread(target=bad)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    st, b = results["bad"]
    check(st == 400, "ambiguous grammar: status %d, want 400: %s" % (st, b))
    msg = b.get("error", {}).get("message", "") if isinstance(b, dict) else ""
    check("grammar too ambiguous" in msg, "ambiguous grammar: message %r" % msg)
    check(b.get("error", {}).get("type") == "invalid_request_error", "error type: %s" % b)
    st, g = results["good"]
    check(st == 200, "request beside it: status %d %s" % (st, g))
    check(st == 200 and g["choices"][0]["text"] == alone["choices"][0]["text"],
          "request beside it: text differs from the same request alone")
    st, _ = s.get("/health")
    check(st == 200, "/health after: %d" % st)
    s.stop()
    if FAILS:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
