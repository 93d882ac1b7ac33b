#!/usr/bin/env bash
# dspark serve over real HTTP: greedy identity with dspark generate, streaming, concurrency, stop
# strings, bad requests, metrics, 503, disconnects, SIGTERM drain (tests/cli/test_serve_client.py).
# The client kills every server it started on exit; `timeout` bounds the whole run.
set -u
: "${DSPARK_BIN:?}" "${DSPARK_SHARED:?}"
here=$(cd "$(dirname "$0")" && pwd)
exec timeout -k 5 300 /usr/bin/python3 "$here/test_serve_client.py"
