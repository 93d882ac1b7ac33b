#!/usr/bin/env bash
# Which rule verifies a sampled request (test_serve_verify.py).
set -u
: "${DSPARK_BIN:?}" "${DSPARK_SHARED:?}"
here=$(cd "$(dirname "$0")" && pwd)
exec timeout -k 5 120 /usr/bin/python3 "$here/test_serve_verify.py"
