#!/usr/bin/env bash
# Packs what bench/webgpu_h200_run.sh needs on a GPU machine into .wgpack/ (excluded from git):
# the release build's tensormorph, backend_conformance_test, webgpu_resident_bench,
# webgpu_tile_kernel_bench, split_bench and
# CUDA module,
# the Debian libraries the machine's image lacks, and Dawn's library; plus .gl/, the Vulkan loader
# and GL dispatch packages (the machine has NVIDIA's Vulkan driver but no loader).
#
# Usage: scripts/build.sh release tensormorph backend_conformance_test webgpu_resident_bench webgpu_tile_kernel_bench split_bench tm_cuda
#        bench/webgpu_h200_pack.sh [BUILD_DIR]      (default build/release)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${1:-build/release}
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for dir in /.wgpack/ /.gl/; do grep -qx "$dir" "$exclude" 2>/dev/null || echo "$dir" >> "$exclude"; done
rm -rf .wgpack && mkdir -p .wgpack/lib .wgpack/plugins .wgpack/tests .wgpack/bench
cp "$build/tensormorph" .wgpack/
cp "$build/tests/backend_conformance_test" .wgpack/tests/
cp "$build/bench/webgpu_resident_bench" "$build/bench/webgpu_tile_kernel_bench" "$build/bench/split_bench" .wgpack/bench/
cp "$build/plugins/libtm_cuda.so" .wgpack/plugins/
cp -r "$build/plugins/hip" "$build/plugins/libtm_hip.so" .wgpack/plugins/ 2>/dev/null || true
for binary in .wgpack/tensormorph .wgpack/tests/backend_conformance_test; do
  ldd "$binary" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libz|libssl|libcrypto|ld-linux[^/]*)\.so' |
  xargs -r -I{} cp -L {} .wgpack/lib/
cp third_party/dawn/node_modules/bun-webgpu-linux-x64/libwebgpu_wrapper.so .wgpack/lib/
mkdir -p .gl /tmp/amd64/partial
o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
apt-get "${o[@]}" update -qq
(cd .gl && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null)
echo ".wgpack: $(du -sh .wgpack | cut -f1), .gl: $(du -sh .gl | cut -f1)"
