#!/usr/bin/env bash
# Builds what bench/cuda_h200_run.sh needs on the GPU machine, from the committed HEAD (not the
# working tree), into .h200/ (excluded from git; .h200/pack is then copied to the GPU machine):
#   .h200/build/{tensormorph, tests/backend_conformance_test, bench/cuda_tile_stats_bench,
#                bench/cuda_upload_bench, plugins/libtm_cuda.so, lib/*.so*}
# lib/ holds the Debian shared libraries the GPU machine's image lacks (TBB, xxHash, ...).
#
# Usage: bench/cuda_h200_build.sh     (needs nvcc; then run bench/cuda_h200_run.sh there)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# In a linked worktree .git is a file: ask git where the exclude file is.
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.h200/' "$exclude" 2>/dev/null || echo '/.h200/' >> "$exclude"
src=/tmp/tm-h200-src
rm -rf "$src" && git worktree prune && git worktree add --detach -f "$src" HEAD >/dev/null
trap 'git -C "$root" worktree remove --force "$src"' EXIT
# The build directory's absolute path is baked into the test (plugin directory): the run script
# recreates it on the GPU machine with a symbolic link.
build=$root/.h200/build
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTM_BUILD_TESTS=ON -DTM_BUILD_BENCH=ON >/dev/null
ninja -C "$build" -j"$(nproc)" tensormorph backend_conformance_test cuda_tile_stats_bench cuda_upload_bench tm_cuda tm_hip
pack=$root/.h200/pack
rm -rf "$pack" && mkdir -p "$pack/lib" "$pack/tests" "$pack/bench" "$pack/plugins"
binaries=(tensormorph tests/backend_conformance_test bench/cuda_tile_stats_bench bench/cuda_upload_bench
          plugins/libtm_cuda.so plugins/libtm_hip.so)
for binary in "${binaries[@]}"; do
  cp "$build/$binary" "$pack/$binary"
  ldd "$build/$binary" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' |
  xargs -r -I{} cp -L {} "$pack/lib/"
echo "$pack: $(du -sh "$pack" | cut -f1):" $(cd "$pack" && find . -type f | sort)
