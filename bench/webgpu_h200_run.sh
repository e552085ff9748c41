#!/usr/bin/env bash
# The WebGPU backend on an NVIDIA GPU through Vulkan, with the CUDA backend in the same run: the
# conformance test (every declared case of both, bitwise against the CPU reference) and
# webgpu_resident_bench (uploads and resident tile_stats, WebGPU / CUDA ratios, bitwise compared),
# webgpu_tile_kernel_bench (the tile kernel's cost taken apart, and rewrites of it checked and timed),
# then split_bench (one operation split between the CPU and CUDA against each alone).
# Run from the repository root on the GPU machine, with .wgpack/ and .gl/ from
# bench/webgpu_h200_pack.sh copied into the tree:  bash bench/webgpu_h200_run.sh OUT_DIR
set -uo pipefail
out=${1:?usage: webgpu_h200_run.sh OUT_DIR}
mkdir -p "$out"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
pack=$PWD/.wgpack
export LD_LIBRARY_PATH=$pack/lib
# The conformance test looks for the modules where the build put them.
if [ ! -e "$PWD/build/release/plugins" ]; then mkdir -p build/release && ln -sfn "$pack/plugins" build/release/plugins; fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/machine.txt"
"$pack/tensormorph" backends 2>&1 | head -45 | tee "$out/backends.txt"
"$pack/tests/backend_conformance_test" --gtest_filter='BackendConformance*' > "$out/conformance.txt" 2>&1
echo "conformance exit $?" | tee -a "$out/conformance.txt"
grep -E "bitwise equal|OK|FAILED|Failure" "$out/conformance.txt"
for run in 1 2; do
  "$pack/bench/webgpu_resident_bench" --mib 1024 --reps 10 --cuda "$pack/plugins/libtm_cuda.so" 2>&1 | tee "$out/resident_$run.txt"
done
# Each variant in its own process, right after the lanes kernel (its reference): within one process
# the times of kernels timed late drifted (the lanes kernel 3.4x slower last than first on an H100).
for variant in words words-unaligned words-16 words-flat-observe words-no-f32-tree words-no-int-sums words-loads-only \
               words-former-add no-fallback-tree no-squares no-exact-sums no-keys no-tail loads-only; do
  "$pack/bench/webgpu_tile_kernel_bench" --mib 1024 --reps 7 lanes "$variant" 2>&1 | grep -v '^device' | tee -a "$out/tile_kernel.txt"
done
# One operation split between the CPU and CUDA: a 20 GB BF16 set, a third resident on the GPU.
timeout 300 "$pack/bench/split_bench" --gib 20 --resident 0.3333 --plugins "$pack/plugins" --device cuda 2>&1 | tee "$out/split.txt"
