#!/usr/bin/env bash
# Spectra on an NVIDIA GPU: the CUDA backend's conformance (the spectrum operations within their
# bounds of the CPU's LAPACK, every other operation bitwise) and bench/spectrum_bench.py's GPU runs
# against torch.linalg.svdvals: the exact SVD on one block of a Llama-7B-shaped model, the Gram rung
# on all 32. Run from the repository root on the GPU machine with .wgpack/ from
# bench/webgpu_h200_pack.sh copied into the tree:  bash bench/spectrum_h200_run.sh OUT_DIR
set -uo pipefail
out=${1:?usage: spectrum_h200_run.sh OUT_DIR}
mkdir -p "$out"
pack=$PWD/.wgpack
export LD_LIBRARY_PATH=$pack/lib
if [ ! -e "$PWD/build/release/plugins" ]; then mkdir -p build/release && ln -sfn "$pack/plugins" build/release/plugins; fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/machine.txt"
nproc | tee -a "$out/machine.txt"
"$pack/tensormorph" backends 2>&1 | head -60 > "$out/backends.txt"
grep -n "spectrum" "$out/backends.txt"
timeout 150 "$pack/tests/backend_conformance_test" --gtest_filter='BackendConformance/EveryOperation.EqualsItsReference/cuda' > "$out/conformance.txt" 2>&1
echo "conformance exit $?" | tee -a "$out/conformance.txt"
grep -E "cases|OK|FAILED|Failure" -A3 "$out/conformance.txt" | head -20
work=$(mktemp -d)
timeout 150 python3 bench/spectrum_bench.py "$pack/tensormorph" gpu --rung exact --blocks 1 --peer-blocks 1 \
  --plugins "$pack/plugins" --workdir "$work" 2>&1 | tee "$out/spectrum_exact.txt"
timeout 260 python3 bench/spectrum_bench.py "$pack/tensormorph" gpu --rung gram --blocks 32 --peer-blocks 1 \
  --plugins "$pack/plugins" --workdir "$work" 2>&1 | tee "$out/spectrum_gram.txt"
rm -rf "$work"
