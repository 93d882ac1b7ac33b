#!/usr/bin/env bash
# Run every libFuzzer target (tests/fuzz/fuzz_*.c) for FUZZ_SECONDS each (default 300), one after
# the other, starting from the committed corpus tests/fuzz/corpus/<target>/.
#   scripts/fuzz.sh BUILD_DIR [TARGET...]       (make fuzz builds BUILD_DIR with clang first)
# New inputs go to BUILD_DIR/fuzz-corpus/<target>/ (the committed corpus is only read); a finding
# (crash, leak, timeout, out of memory) is written to BUILD_DIR/fuzz-findings/<target>/ and named at
# the end. To keep a fixed one as a regression test, copy it into tests/fuzz/corpus/<target>/ (the
# replay in `make test` runs it). At the end one line per target: executions and wall seconds.
# Exit status: 0 when no target found anything.
set -uo pipefail
build=${1:?usage: scripts/fuzz.sh BUILD_DIR [TARGET...]}
shift
root="$(cd "$(dirname "$0")/.." && pwd)"
secs=${FUZZ_SECONDS:-300}
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in "$root"/tests/fuzz/fuzz_*.c; do t=$(basename "$f" .c); targets+=("${t#fuzz_}"); done
fi
found=() summary=()
for t in "${targets[@]}"; do
  bin="$build/bin/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz: $bin is missing (make fuzz builds it)" >&2; exit 2; }
  work="$build/fuzz-corpus/$t" out="$build/fuzz-findings/$t"
  mkdir -p "$work" "$out"
  echo "fuzz: $t for ${secs}s" >&2
  t0=$SECONDS
  # -timeout: one input may take 10 s (a hang otherwise); -rss_limit_mb: 2 GB (an out-of-memory finding).
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$out/" "$work" "$root/tests/fuzz/corpus/$t" > "$build/fuzz-$t.log" 2>&1
  rc=$?
  t1=$SECONDS
  # -print_final_stats: "stat::number_of_executed_units: N" (absent when the run stopped on a finding)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/fuzz-$t.log" | tail -1)
  summary+=("$(printf '%-14s %10s executions in %4d s' "$t" "${execs:-?}" $((t1 - t0)))")
  tail -n 3 "$build/fuzz-$t.log" | sed "s/^/fuzz: $t: /" >&2
  if [ $rc -ne 0 ] || [ -n "$(ls -A "$out")" ]; then found+=("$t"); fi
done
printf 'fuzz: %s\n' "${summary[@]}" >&2
if [ ${#found[@]} -ne 0 ]; then
  echo "fuzz: findings in: ${found[*]} (see $build/fuzz-findings/ and $build/fuzz-<target>.log)" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${secs}s each, nothing found" >&2
