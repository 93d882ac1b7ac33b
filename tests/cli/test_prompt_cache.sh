#!/usr/bin/env bash
# The prompt cache: identical outputs on and off, reuse reported, LRU bound (test_prompt_cache.py).
set -u
: "${DSPARK_BIN:?}" "${DSPARK_SHARED:?}"
here=$(cd "$(dirname "$0")" && pwd)
exec timeout -k 5 300 /usr/bin/python3 "$here/test_prompt_cache.py"
