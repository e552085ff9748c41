#!/usr/bin/env bash
# Builds the libFuzzer targets (build/fuzz: clang, ASan + UBSan) and fuzzes each parser for
# SECONDS (default 600), one process each, as many at a time as there are cores. New corpus units
# go to build/fuzz/corpus/<target> (seeded from fuzz/corpus/<target>); crash, timeout and leak
# inputs to build/fuzz/artifacts/<target>.
# Exits non-zero when any target reported a crash. Keep a crash input as a regression case by
# copying it to fuzz/regressions/<target>/ together with the fix.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     targets: gguf safetensors safetensors_index zip pickle dcp
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=(gguf safetensors safetensors_index zip pickle dcp); fi

build=build/fuzz
if [ ! -f "$build/build.ninja" ]; then
  cmake -S fuzz -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DTM_WERROR=ON >/dev/null
fi
ninja -C "$build" "${targets[@]/#/fuzz_}"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target per core at a time; each reports when all are done.
fuzz_one() {
  local t=$1 corpus="$build/corpus/$1" artifacts="$build/artifacts/$1"
  mkdir -p "$corpus" "$artifacts" "fuzz/regressions/$t"
  rm -f "$build/fuzz_$t.failed"
  # The first corpus directory receives new units; the seeds in the tree are only read.
  if ! "$build/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" "$corpus" "fuzz/corpus/$t" "fuzz/regressions/$t" \
      >"$build/fuzz_$t.log" 2>&1; then
    touch "$build/fuzz_$t.failed"
  fi
}
echo "== fuzzing ${targets[*]} for ${seconds}s each, $(nproc) at a time"
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
  fuzz_one "$t" &
done
wait
failed=()
for t in "${targets[@]}"; do
  echo "== fuzz_$t"
  if [ -e "$build/fuzz_$t.failed" ]; then
    failed+=("$t")
    grep -E "ERROR|SUMMARY|Test unit written" "$build/fuzz_$t.log" || tail -20 "$build/fuzz_$t.log"
  fi
  grep -E "^#[0-9]+[[:space:]]+DONE" "$build/fuzz_$t.log" || tail -3 "$build/fuzz_$t.log"
  grep -E "^stat::number_of_executed_units" "$build/fuzz_$t.log" || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzing found problems in: ${failed[*]} (inputs in $build/artifacts/)" >&2
  exit 1
fi
