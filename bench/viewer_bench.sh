#!/usr/bin/env bash
# The viewer in a browser: time to first meaningful paint with a warm index and the time of tree,
# search and overview interactions, on a generated 10,000-tensor checkpoint and on the demo, in
# headless Debian Chromium (bench/viewer_bench.mjs prints each against its target).
# Tile latency under 8 clients is bench/serve_bench.sh.
# Usage: bench/viewer_bench.sh [BINARY] (default build/release/tensormorph; web/dist must be built)
set -euo pipefail
cd "$(dirname "$0")/.."
tm="$(realpath "${1:-build/release/tensormorph}")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export TENSORMORPH_CONFIG="$work/settings.json"
# 400 blocks of 25 tensors (attention, MLP, norms, biases), F16 [64, 64] and [64]: 10,000 tensors.
/usr/bin/python3 - "$work/many.safetensors" <<'PY'
import json, struct, sys, numpy as np
rng = np.random.default_rng(10000)
roles = ["input_layernorm.weight", "post_attention_layernorm.weight"] + \
    [f"self_attn.{p}_proj.{k}" for p in "qkvo" for k in ("weight", "bias")] + \
    [f"mlp.{p}_proj.{k}" for p in ("gate", "up", "down") for k in ("weight", "bias")] + \
    [f"self_attn.{n}" for n in ("q_norm.weight", "k_norm.weight", "rotary.inv_freq")] + \
    [f"mlp.experts.{e}.weight" for e in range(6)]
assert len(roles) == 25, len(roles)
header, blobs, offset = {}, [], 0
for b in range(400):
    for r in roles:
        shape = [64] if ("norm" in r or "bias" in r or "inv_freq" in r) else [64, 64]
        v = (rng.standard_normal(shape) * 0.02 + (1.0 if "norm" in r else 0.0)).astype(np.float16)
        data = v.tobytes()
        header[f"model.layers.{b}.{r}"] = {"dtype": "F16", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
raw = json.dumps(header).encode()
raw += b" " * (-len(raw) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(raw))); f.write(raw)
    for d in blobs: f.write(d)
PY
"$tm" demo "$work/demo" >/dev/null
"$tm" index "$work/many.safetensors" >/dev/null
"$tm" index "$work/demo" >/dev/null
node bench/viewer_bench.mjs "$tm" "$work/many.safetensors" "$work/demo"
