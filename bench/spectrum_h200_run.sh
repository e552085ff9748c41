#!/usr/bin/env bash
# Spectra on an NVIDIA GPU: the CUDA backend's conformance (the spectrum operations within their
# bounds of the CPU's LAPACK, every other operation bitwise) and bench/spectrum_bench.py's GPU runs
# against torch.linalg.svdvals: the exact SVD on every matrix of a Llama-7B-shaped model (32 blocks;
# the peer's loop on the first), then with `gram` the Gram rung too. Run from the repository root on
# the GPU machine with .wgpack/ from bench/webgpu_h200_pack.sh copied into the tree:
#   bash bench/spectrum_h200_run.sh OUT_DIR [gram]
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
conformance=$?
echo "conformance exit $conformance" | tee -a "$out/conformance.txt"
grep -E "cases|OK|FAILED|Failure" -A3 "$out/conformance.txt" | head -20
# A module that does not conform is not worth timing.
[ "$conformance" -eq 0 ] || exit 1
work=$(mktemp -d)
timeout 330 python3 bench/spectrum_bench.py "$pack/tensormorph" gpu --rung exact --blocks 32 --peer-blocks 1 \
  --plugins "$pack/plugins" --workdir "$work" 2>&1 | tee "$out/spectrum_exact.txt"
[ "${2:-}" = gram ] && timeout 260 python3 bench/spectrum_bench.py "$pack/tensormorph" gpu --rung gram --blocks 32 --peer-blocks 1 \
  --plugins "$pack/plugins" --workdir "$work" 2>&1 | tee "$out/spectrum_gram.txt"
rm -rf "$work"
