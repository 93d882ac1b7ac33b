#!/usr/bin/env bash
# Rewrite README.md's command reference (between <!-- cli-reference:begin --> and
# <!-- cli-reference:end -->) with `dspark help --markdown`, generated from the option tables in
# cli/ (tests/cli/test_cli_reference.sh checks that they agree). Usage: scripts/cli_reference.sh [BIN]
set -eu
cd "$(dirname "$0")/.."
BIN=${1:-build/bin/dspark}
ref=$(mktemp)
trap 'rm -f "$ref"' EXIT
"$BIN" help --markdown >"$ref"
python3 - "$ref" <<'PY'
import re, sys
ref = open(sys.argv[1]).read()
readme = open("README.md").read()
begin, end = "<!-- cli-reference:begin", "<!-- cli-reference:end -->"
a = readme.index(begin)
a = readme.index("\n", a) + 1
b = readme.index(end)
open("README.md", "w").write(readme[:a] + ref + readme[b:])
PY
