#!/usr/bin/env bash
# CPU indexing on a machine of many cores (issue 4 asks the CPU path to run near the memory
# bandwidth "on many cores"). Runs, on the benchmark checkpoints of bench/make_bench_checkpoints.py:
#   1. bench/index_bench.sh with every core (read bandwidth, index, numpy peer, cold vs dd);
#   2. a thread sweep: read bandwidth (anonymous memory, and a sum over the mapped file) and
#      `tensormorph index` (best of 3, the tool's own time) at 1, 2, 4, ... threads;
#   3. the tile_stats kernels on one core, in cache and from DRAM (bench/cpu_tile_stats_bench).
#
# Usage: bench/cpu_many_core_run.sh PACK_DIR OUT_DIR [DIR]   (PACK_DIR from bench/cpu_pack.sh)
# STEPS (default "1 2 3") picks the steps, e.g. STEPS=3 for the kernels alone.
# As run for docs/PERFORMANCE.md, on the many-core machine with .h200/cpu copied into the tree:
#   bash bench/cpu_many_core_run.sh .h200/cpu $OUT
set -euo pipefail
pack=$(cd "$1" && pwd)
out=$2
dir=${3:-/tmp/tm-bench}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
export PATH="$PATH:$pack"  # the packed fincore where the machine has none
export TENSORMORPH_CONFIG=/tmp/tm_cpu_bench_settings.json  # defaults, not the machine's settings
cores=$(nproc)
{
  echo "cores $cores · $(lscpu | sed -n 's/^Model name: *//p') · $(free -g | awk '/^Mem:/ { print $2 }') GiB"
  lscpu | grep -E '^(Thread|Core|Socket|NUMA node)' || true
  "$pack/tensormorph" backends | sed -n 1,3p  # sed reads it all: no SIGPIPE under pipefail
} | tee "$out/machine.txt"

steps=" ${STEPS:-1 2 3} "
if [[ $steps == *" 1 "* ]]; then
echo "== index benchmark, $cores threads"
TM_BIN=$pack/tensormorph TM_RBW=$pack/read_bandwidth THREADS=$cores NUMPY_LIMIT=${NUMPY_LIMIT:-200000000} \
  TABLE_OUT=$out/index_table.md bash "$root/bench/index_bench.sh" "$dir" 2>&1 | tee "$out/index_bench.txt"

fi

if [[ $steps == *" 2 "* ]]; then
echo "== thread sweep"
threads=()
for ((t = 1; t < cores; t *= 2)); do threads+=("$t"); done
threads+=("$cores")
{
  echo "| checkpoint | threads | read bandwidth GB/s (anon) | sum over the mapped file GB/s | index GB/s | index / bandwidth |"
  echo "|---|---|---|---|---|---|"
  for name in f32.safetensors bf16.safetensors q8_0.gguf q4_k.gguf; do
    f=$dir/$name
    size=$(stat -c %s "$f")
    # Into the page cache in 2 MiB folios where the file system allows, as index_bench.sh warms.
    dd if="$f" iflag=nocache count=0 status=none
    "$pack/read_bandwidth" --map-only "$f"
    for t in "${threads[@]}"; do
      bw=$("$pack/read_bandwidth" --threads "$t" --mib 1024 --repeat 3 "$f")
      anon=$(awk '$1 == "anon_4k" || $1 == "anon_thp" { if ($2 > m) m = $2 } END { print m }' <<<"$bw")
      mapped=$(awk '$1 == "mmap_file" { print $2 }' <<<"$bw")
      best=1e9
      for _ in 1 2 3; do
        rm -f "$f.tmindex"
        s=$("$pack/tensormorph" index --threads "$t" "$f" 2>/dev/null | awk '$1 == "time" { print $2 }')
        best=$(awk -v a="$best" -v b="$s" 'BEGIN { print (b < a ? b : a) }')
      done
      gbps=$(awk -v n="$size" -v s="$best" 'BEGIN { printf "%.2f", n / s / 1e9 }')
      echo "| $name | $t | $anon | $mapped | $gbps | $(awk -v a="$gbps" -v b="$anon" 'BEGIN { printf "%d%%", 100 * a / b + 0.5 }') |"
    done
  done
} | tee "$out/thread_sweep.md"
fi

if [[ $steps == *" 3 "* ]]; then
echo "== one core, in cache and from DRAM"
"$pack/cpu_tile_stats_bench" --benchmark_filter='OneCore(InCache|FromMemory)/' 2>&1 | grep -E '^BM' |
  awk '{ printf "%s", $1; for (i = 2; i <= NF; i++) if ($i ~ /=/) printf " %s", $i; print "" }' | tee "$out/one_core.txt"
fi
