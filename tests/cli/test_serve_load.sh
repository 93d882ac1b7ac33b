#!/usr/bin/env bash
# dspark serve under hostile load on loopback: idle connections cannot make it unreachable (per-
# client limit, header timeout), and a bounded soak of mixed, abandoned and malformed requests from
# many clients has no failure, bounded RSS and consistent /metrics (tests/cli/test_serve_load.py;
# DSPARK_SOAK_SECONDS sets the soak's length, default 60). `timeout` bounds the whole run.
set -u
: "${DSPARK_BIN:?}" "${DSPARK_SHARED:?}"
here=$(cd "$(dirname "$0")" && pwd)
exec timeout -k 5 400 /usr/bin/python3 "$here/test_serve_load.py"
