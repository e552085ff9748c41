#!/usr/bin/env bash
# The CUDA backend's checks and measurements on a GPU machine, in one go (run there from a build
# made elsewhere and copied over): the conformance test, the tile_stats and upload benchmarks,
# the PyTorch peer on the same BF16 tensor, and `tensormorph index` CPU-only vs Auto.
#
# Usage: bench/cuda_h200_run.sh PACK_DIR OUT_DIR
#   PACK_DIR (made by bench/cuda_h200_build.sh, normally .h200/pack) holds tensormorph,
#   tests/backend_conformance_test, bench/cuda_tile_stats_bench, bench/cuda_upload_bench,
#   plugins/libtm_cuda.so, and lib/
#   with the shared libraries the machine lacks (TBB, xxHash, ...).
# As run for docs/PERFORMANCE.md, on the GPU machine with .h200/pack copied into the tree:
#   mkdir -p /work/main/.h200 && ln -sfn $PWD/.h200/pack /work/main/.h200/build &&
#   bash bench/cuda_h200_run.sh .h200/pack $OUT
set -uo pipefail
build=$(cd "$1" && pwd)
out=$2
mkdir -p "$out"
export TENSORMORPH_CONFIG=/tmp/tm_bench_settings.json  # defaults, not the machine's settings
# Our binaries find the carried libraries; python3 (PyTorch) keeps the machine's own.
run() { env LD_LIBRARY_PATH="$build/lib:${LD_LIBRARY_PATH:-}" "$@"; }
step() { echo; echo "== $*"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$out/machine.txt"
nproc | tee -a "$out/machine.txt"

step "backend_conformance_test"
run "$build/tests/backend_conformance_test" 2>&1 | tee "$out/conformance.txt"

step "cuda_tile_stats_bench"
run "$build/bench/cuda_tile_stats_bench" --gib 1 --reps 20 --json "$out/bench.json" 2>&1 | tee "$out/bench.txt"

step "cuda_upload_bench"
run "$build/bench/cuda_upload_bench" --module "$build/plugins/libtm_cuda.so" 2>&1 | tee "$out/upload.txt"

step "PyTorch peer"
python3 bench/cuda_torch_peer.py /tmp/tm_bench_bf16.safetensors --reps 10 --json "$out/torch.json" 2>&1 |
  tee "$out/torch.txt"

step "tensormorph backends"
run "$build/tensormorph" backends 2>&1 | head -40 | tee "$out/backends.txt"

for mode in only=cpu auto; do
  step "tensormorph index --compute $mode"
  rm -f /tmp/tm_bench_index_*
  TIMEFORMAT="wall %R s"
  time run "$build/tensormorph" index /tmp/tm_bench_bf16.safetensors \
    --compute "$mode" --explain --index-path "/tmp/tm_bench_index_${mode%%=*}.tmindex" 2>&1 | tee "$out/index_${mode%%=*}.txt"
done

# A checkpoint of many tensors, small ones first (two llama layers in BF16: norm vectors, then
# 4096x4096 and 11008x4096 matrices), where the scheduler's calibration sees small operations
# before large ones.
step "tensormorph index of bf16.safetensors (bench/make_bench_checkpoints.py), --compute only=cpu and auto"
if python3 bench/make_bench_checkpoints.py /tmp/tm-bench bf16.safetensors; then
  for mode in only=cpu auto; do
    rm -f /tmp/tm_layers_index_*
    time run "$build/tensormorph" index /tmp/tm-bench/bf16.safetensors --compute "$mode" --explain \
      --index-path "/tmp/tm_layers_index_${mode%%=*}.tmindex" 2>&1 | tee "$out/index_layers_${mode%%=*}.txt"
  done
fi
