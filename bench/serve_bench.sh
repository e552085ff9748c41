#!/usr/bin/env bash
# Tile latency of `tensormorph serve` on an 8192 x 8192 BF16 tensor and on the demo checkpoint,
# plus wrk at 8 connections on cached tiles. Usage: bench/serve_bench.sh [BINARY] (default build/release/tensormorph)
set -euo pipefail
cd "$(dirname "$0")/.."
tm="$(realpath "${1:-build/release/tensormorph}")"
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
export TENSORMORPH_CONFIG="$work/settings.json"
/usr/bin/python3 - "$work/big.safetensors" <<'PY'
import json, struct, sys, numpy as np
rng = np.random.default_rng(6)
v = (rng.standard_normal((8192, 8192), dtype=np.float32) * 0.02)
v[:, 100] *= 30  # an outlier column
bits = (v.view(np.uint32) >> 16).astype(np.uint16)
header = json.dumps({"w": {"dtype": "BF16", "shape": [8192, 8192], "data_offsets": [0, bits.nbytes]}}).encode()
header += b" " * (-len(header) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(header))); f.write(header); bits.tofile(f)
PY
"$tm" demo "$work/demo" >/dev/null
"$tm" index "$work/big.safetensors" >/dev/null
"$tm" index "$work/demo" >/dev/null
for target in big demo; do
  path="$work/big.safetensors"; name=w; index=0
  if [ "$target" = demo ]; then path="$work/demo"; name=model.embed_tokens.weight; index=0; fi
  "$tm" serve "$path" --port 0 > "$work/$target.out" &
  pids+=($!)
  for _ in $(seq 100); do grep -q http "$work/$target.out" && break; sleep 0.1; done
  url=$(grep -o 'http://[^ ]*' "$work/$target.out")
  for _ in $(seq 100); do curl -s "${url}api/checkpoints" | grep -q '"ready"' && break; sleep 0.2; done  # index loaded
  /usr/bin/python3 bench/serve_bench.py "$url" 0 "$index" --name "$name" --tiles 400
  # wrk: 8 connections for 10 s on one cached tile per level of detail.
  cat > "$work/wrk.lua" <<LUA
request = function() return wrk.format("GET", "/api/tile/0/$index/" .. level_pick() .. "/0/0.png?lo=-0.05&hi=0.05") end
LUA
  max=$(curl -s "${url}api/tensor?ckpt=0&tensor=$name" | python3 -c 'import json,sys; z=json.load(sys.stdin)["zoom"]; print(z["min_level"], z["max_level"])')
  read -r lmin lmax <<< "$max"
  printf 'local l = %s\nlevel_pick = function() l = l + 1; if l > %s then l = %s end; return l end\n' "$lmin" "$lmax" "$lmin" > "$work/wrk_head.lua"
  cat "$work/wrk_head.lua" "$work/wrk.lua" > "$work/wrk_all.lua"
  wrk -t4 -c8 -d10s --latency -s "$work/wrk_all.lua" "$url" | grep -E "Requests/sec|50%|99%|Non-2xx|Socket errors" | sed "s/^/wrk $target: /"
  kill "${pids[-1]}"
done
