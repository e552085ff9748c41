#!/usr/bin/env bash
# Start-up cost of a device module: the wall time of `info` and `stats` on a small checkpoint and
# of `index` on a 1 GiB BF16 checkpoint, with the tensormorph binary beside its plugins/ (the CUDA
# module there) and with a copy of the same binary that has no plugins/ beside it, interleaved,
# median of the runs. The target: each command with the module exceeds the same without it by at
# most 30 ms.
#
# Usage: bench/startup.sh BINARY [RUNS]   (BINARY's directory holds plugins/libtm_cuda.so)
set -euo pipefail
bin=$(readlink -f "$1")
runs=${2:-7}
work=$(mktemp -d /tmp/tm-startup.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bare"
cp "$bin" "$work/bare/tensormorph"  # no plugins/ beside this copy
export TENSORMORPH_CONFIG="$work/settings.json"  # defaults, not the machine's settings
export XDG_CACHE_HOME="$work/cache"

python3 - "$work" <<'EOF'
import json, os, struct, sys
work = sys.argv[1]
def write(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, (rows, cols) in tensors.items():
        n = rows * cols * 2
        header[name] = {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [offset, offset + n]}
        offset += n
        blobs.append(n)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        # Finite BF16 weights (random signs and mantissas, magnitudes 2^-7..2^-3), as a
        # checkpoint holds: random bits would put NaN and Inf in every row.
        chunk = bytearray(os.urandom(1 << 20))
        chunk[1::2] = bytes((b & 0x80) | 0x3C | (b & 0x01) for b in chunk[1::2])
        chunk = bytes(chunk)
        for n in blobs:
            while n > 0:
                k = min(n, len(chunk))
                f.write(chunk[:k])
                n -= k
write(os.path.join(work, "small.safetensors"), {"w": (256, 256)})
write(os.path.join(work, "big.safetensors"), {f"layer{i}": (8192, 8192) for i in range(8)})  # 1 GiB
EOF

# Median wall seconds of a command, one run per call (callers interleave).
wall() {
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.6f\n", b - a }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "machine: $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
     "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || echo 'no GPU')"
echo "module: $(ls "$(dirname "$bin")"/plugins/*.so 2>/dev/null | xargs -n1 basename | tr '\n' ' ')"
"$bin" index --index-path "$work/warm.tmindex" "$work/big.safetensors" >/dev/null  # page cache warm, start-up measured once
for cmd in info stats index; do
  : >"$work/with" && : >"$work/without"
  for ((r = 0; r < runs; ++r)); do
    for variant in with without; do
      b=$bin
      [[ $variant == without ]] && b=$work/bare/tensormorph
      case $cmd in
        info) wall "$b" info "$work/small.safetensors" >>"$work/$variant" ;;
        stats) wall "$b" stats "$work/small.safetensors" >>"$work/$variant" ;;
        index) rm -f "$work/big.tmindex"
               wall "$b" index --index-path "$work/big.tmindex" "$work/big.safetensors" >>"$work/$variant" ;;
      esac
    done
  done
  with=$(median <"$work/with")
  without=$(median <"$work/without")
  extra_ms=$(awk -v a="$with" -v b="$without" 'BEGIN { printf "%.1f", (a - b) * 1000 }')
  printf '%-6s with module %.3f s, without %.3f s, extra %+.1f ms (limit 30 ms): %s\n' "$cmd" "$with" "$without" \
    "$extra_ms" "$(awk -v e="$extra_ms" 'BEGIN { print (e <= 30 ? "met" : "MISSED") }')"
done
