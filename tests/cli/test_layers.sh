#!/bin/bash
# The layer map of docs/architecture.md holds (scripts/check_layers.py: includes and the symbols
# each layer's object files use), and the check fails on a planted include and a planted call that
# reach up the order, and on a cli/ file that includes a library header (cli/ sees include/ only).
set -u
SRC=${DSPARK_SRC:?}
BUILD=$(cd "${DSPARK_BIN:?}/.." && pwd)
TMP=${DSPARK_TMP:-/tmp}/test_layers.$$
PY=/usr/bin/python3
fail() { echo "FAIL: $*"; rm -rf "$TMP"; exit 1; }
mkdir -p "$TMP"
# A copy of what the check reads (sources, public headers, the layer map) to plant violations in.
copy_tree() { mkdir -p "$1/docs" && cp -r "$SRC/src" "$SRC/cli" "$SRC/include" "$1/" && cp "$SRC/docs/architecture.md" "$1/docs/"; }

out=$($PY "$SRC/scripts/check_layers.py" --root "$SRC" --objects "$BUILD/layer_objects.txt" 2>&1) \
    || fail "the tree violates the layer map:"$'\n'"$out"

# A kernel that includes the engine's verification header (speculate is above kernels).
copy_tree "$TMP/root"
sed -i '1i #include "speculate/verify.h"' "$TMP/root/src/kernels/ops.c"
out=$($PY "$SRC/scripts/check_layers.py" --root "$TMP/root" 2>&1) && fail "a planted upward include passed"
echo "$out" | grep -q 'src/kernels/ops.c:1: #include "speculate/verify.h" reaches up: src/speculate is above src/kernels' \
    || fail "unexpected message for the planted include: $out"

# A kernel that includes the composed public header (it declares every layer), and a sampler that
# includes the engine's public header (speculate is above sample).
copy_tree "$TMP/pub"
sed -i '1i #include "dspark.h"' "$TMP/pub/src/kernels/ops.c"
sed -i '1i #include "dspark/speculate.h"' "$TMP/pub/src/sample/sampler.c"
sed -i '1i #include "dspark/gen.h"' "$TMP/pub/include/dspark/model.h"
out=$($PY "$SRC/scripts/check_layers.py" --root "$TMP/pub" 2>&1) && fail "a planted upward public include passed"
echo "$out" | grep -q '^src/kernels/ops.c:1: #include "dspark.h" declares every layer: src/kernels includes include/dspark/kernels.h or a lower layer.s header instead$' \
    || fail "unexpected message for the planted dspark.h include: $out"
echo "$out" | grep -q '^src/sample/sampler.c:1: #include "dspark/speculate.h" reaches up: src/speculate is above src/sample$' \
    || fail "unexpected message for the planted public include: $out"
echo "$out" | grep -q '^include/dspark/model.h:1: #include "dspark/gen.h" reaches up: src/gen is above src/model$' \
    || fail "unexpected message for the planted public header include: $out"

# A kernel that calls the engine does not compile: its layer's header does not declare it, and the
# library builds with -Werror=implicit-function-declaration.
printf '#include "dspark/kernels.h"\nvoid planted(void) { ds_engine_step(0); }\n' > "$TMP/upcall.c"
out=$(cc -std=gnu11 -Werror=implicit-function-declaration -I "$SRC/include" -c "$TMP/upcall.c" -o "$TMP/upcall.o" 2>&1) \
    && fail "a kernel calling ds_engine_step through its own layer's header compiled"
echo "$out" | grep -q "implicit declaration of function .ds_engine_step." || fail "unexpected compiler output: $out"
grep -q -- '-Werror=implicit-function-declaration' "$SRC/CMakeLists.txt" || fail "the library is not built with -Werror=implicit-function-declaration"
for f in $(grep -rl '#include "dspark.h"\|#include "dspark_jobs.h"' "$SRC/src"); do
  case "$f" in "$SRC"/src/jobs/*|"$SRC"/src/serve/*) ;; *) fail "$f includes a composed public header";; esac
done

# cli/ reaching past the public headers: a library header by its layer path, and by angle brackets.
copy_tree "$TMP/cli_root"
$PY "$SRC/scripts/check_layers.py" --root "$TMP/cli_root" >/dev/null 2>&1 || fail "the copied tree does not pass"
sed -i '1i #include "gen/prompts.h"' "$TMP/cli_root/cli/eval.c"
sed -i '1i #include <io/json.h>' "$TMP/cli_root/cli/profile.c"
out=$($PY "$SRC/scripts/check_layers.py" --root "$TMP/cli_root" 2>&1) && fail "a planted cli/ include of src/ passed"
echo "$out" | grep -q '^cli/eval.c:1: #include "gen/prompts.h": cli/ may include only the public headers (include/: dspark.h, dspark_jobs.h, dspark/\*.h), cli.h and system headers$' \
    || fail "unexpected message for the planted cli/ include: $out"
echo "$out" | grep -q '^cli/profile.c:1: #include <io/json.h> reaches into src/: cli/ may include only the public headers$' \
    || fail "unexpected message for the planted cli/ <include>: $out"

# A kernel object file that calls the engine, with no include at all (dspark.h declares it).
mkdir -p "$TMP/obj/dspark.dir/src/kernels"
printf '#include "dspark.h"\nvoid planted(void) { ds_engine_step(0); }\n' > "$TMP/planted.c"
cc -c -I "$SRC/include" "$TMP/planted.c" -o "$TMP/obj/dspark.dir/src/kernels/planted.c.o" || fail "cannot compile"
{ cat "$BUILD/layer_objects.txt"; echo "$TMP/obj/dspark.dir/src/kernels/planted.c.o"; } > "$TMP/objects.txt"
out=$($PY "$SRC/scripts/check_layers.py" --root "$SRC" --objects "$TMP/objects.txt" 2>&1) && fail "a planted upward call passed"
echo "$out" | grep -q 'src/kernels/planted.c: uses ds_engine_step from src/speculate/engine.c (src/speculate is above src/kernels)' \
    || fail "unexpected message for the planted call: $out"
rm -rf "$TMP"
echo "ok"
