#!/usr/bin/env bash
# Packs a built `tensormorph`, `bench/read_bandwidth` and `bench/cpu_tile_stats_bench` with the shared libraries another Linux
# machine may lack, for bench/cpu_many_core_run.sh on a machine of many cores (the host of a GPU
# machine, say). No backend modules are packed, so the binary there runs on the CPU alone.
#
# Usage: bench/cpu_pack.sh BUILD_DIR PACK_DIR     (e.g. build-perf .h200/cpu; .h200/ is git-excluded)
#   PACK_DIR/{tensormorph,read_bandwidth,cpu_tile_stats_bench,fincore} are wrappers that point the real binaries
#   (in PACK_DIR/bin) at PACK_DIR/lib, leaving other programs (python3) the machine's own libraries.
set -euo pipefail
build=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.git/info"
grep -qx '/.h200/' "$root/.git/info/exclude" 2>/dev/null || echo '/.h200/' >> "$root/.git/info/exclude"
pack=$2
rm -rf "$pack" && mkdir -p "$pack/bin" "$pack/lib"
# fincore (util-linux) too: index_bench.sh checks page-cache residency with it.
for binary in "$build/tensormorph" "$build/bench/read_bandwidth" "$build/bench/cpu_tile_stats_bench" "$(command -v fincore)"; do
  cp "$binary" "$pack/bin/"
  ldd "$binary" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' |
  xargs -r -I{} cp -L {} "$pack/lib/"
for name in tensormorph read_bandwidth cpu_tile_stats_bench fincore; do
  cat > "$pack/$name" <<WRAPPER
#!/bin/sh
here=\$(cd "\$(dirname "\$0")" && pwd)
LD_LIBRARY_PATH="\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$here/bin/$name" "\$@"
WRAPPER
  chmod +x "$pack/$name"
done
echo "$pack: $(du -sh "$pack" | cut -f1)"
