#!/usr/bin/env bash
# Where the CUDA tile_stats kernels spend their time, on a GPU machine with Nsight Compute and
# cuobjdump (an NVIDIA H200): the SASS of the plugin, an instruction histogram of the fast BF16
# kernel and the Q4_K kernel, and ncu's speed-of-light, occupancy, scheduler and warp-state
# sections for one launch of each (clocks left alone).
#
# Usage: bench/cuda_h200_profile.sh PACK_DIR OUT_DIR   (PACK_DIR as for cuda_h200_run.sh)
set -uo pipefail
build=$(cd "$1" && pwd)
out=$2
mkdir -p "$out"
export TENSORMORPH_CONFIG=/tmp/tm_profile_settings.json
run() { env LD_LIBRARY_PATH="$build/lib:${LD_LIBRARY_PATH:-}" "$@"; }

cuobjdump --dump-sass "$build/plugins/libtm_cuda.so" >"$out/sass.txt" 2>&1
# The SASS of the one function whose mangled name contains $1, and its opcode histogram.
function_sass() { awk -v pat="$1" '/Function :/ { on = index($0, pat) > 0 } on' "$out/sass.txt"; }
histogram() {
  grep -E '/\*[0-9a-f]{4}\*/' | sed -E 's/.*\*\/ +//; s/^@!?U?P[0-9T] +//' | awk '{ print $1 }' | sed 's/\..*//' |
    sort | uniq -c | sort -rn | head -30
}
function_sass 'tile_rows_fastINS_5Dec16ILb1EEELi16ELj4E' >"$out/sass_bf16.txt"
function_sass 'tile_rows_q4_kILj1E' >"$out/sass_q4_k.txt"
{
  echo "== BF16 fast kernel of the default tile: $(grep -cE '/\*[0-9a-f]{4}\*/' "$out/sass_bf16.txt") instructions"
  histogram <"$out/sass_bf16.txt"
  echo "== Q4_K kernel of the default tile: $(grep -cE '/\*[0-9a-f]{4}\*/' "$out/sass_q4_k.txt") instructions"
  histogram <"$out/sass_q4_k.txt"
} >"$out/sass_summary.txt" 2>&1
cat "$out/sass_summary.txt"

# Demangled names: the BF16 fast kernel of the default tile, and the Q4_K kernel.
for kernel in 'tile_rows_fast<tm_gpu::Dec16<\(bool\)1>, \(int\)16' 'tile_rows_q4_k'; do
  tag=${kernel%%<*}
  run ncu --clock-control none --kernel-name-base demangled --kernel-name "regex:$kernel" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section LaunchStats --section InstructionStats \
    "$build/bench/cuda_tile_stats_bench" --gib 1 --reps 2 >"$out/ncu_$tag.txt" 2>&1
  echo "== ncu $kernel (exit $?)"
  grep -E 'tile_rows|Duration|Elapsed Cycles|SM Active Cycles|Throughput|Occupancy|Registers Per|Issued Warp|No Eligible|Eligible Warps|Warp Cycles Per Issued|Spilling Requests|L1/TEX Hit|L2 Hit|Executed Instructions  |stalled|represents about' \
    "$out/ncu_$tag.txt" | head -60
done
