#!/usr/bin/env bash
# A grammar too ambiguous to follow fails only its request (test_serve_grammar_fail.py).
set -u
: "${DSPARK_BIN:?}" "${DSPARK_SHARED:?}"
here=$(cd "$(dirname "$0")" && pwd)
exec timeout -k 5 120 /usr/bin/python3 "$here/test_serve_grammar_fail.py"
