#!/usr/bin/env bash
# The upload measurements alone on a GPU machine (cuda_h200_run.sh runs them with everything
# else): the machine, the conformance test when the pack holds it, and cuda_upload_bench.
#
# Usage: bench/cuda_upload_h200_run.sh PACK_DIR [cuda_upload_bench arguments...]
#   PACK_DIR as for cuda_h200_run.sh (bench/cuda_upload_bench and plugins/libtm_cuda.so at least).
set -uo pipefail
build=$(cd "$1" && pwd)
shift
export TENSORMORPH_CONFIG=/tmp/tm_bench_settings.json  # defaults, not the machine's settings
run() { env LD_LIBRARY_PATH="$build/lib:${LD_LIBRARY_PATH:-}" "$@"; }
step() { echo; echo "== $*"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,pcie.link.gen.current,pcie.link.width.current \
  --format=csv 2>&1
echo "$(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
free -g | head -2

if [ -x "$build/tests/backend_conformance_test" ]; then
  step "backend_conformance_test"
  run "$build/tests/backend_conformance_test" 2>&1
fi

step "cuda_upload_bench $*"
run "$build/bench/cuda_upload_bench" --module "$build/plugins/libtm_cuda.so" "$@" 2>&1
