#!/usr/bin/env python3
"""Writes the indexing benchmark's checkpoints (issue 4): one file per storage type, about 0.8 GB each.

    python3 bench/make_bench_checkpoints.py [DIR [NAME...]]   (default /tmp/tm-bench, every file)

Shapes are those of a 7B llama layer (q/k/v/o 4096x4096, gate/up 11008x4096, down 4096x11008, two
4096 norm vectors); each checkpoint repeats that layer until it holds about 0.8 GB:

    f32.safetensors   1 layer  (F32)
    bf16.safetensors  2 layers (BF16)
    f16.safetensors   2 layers (F16)
    q8_0.gguf         4 layers (Q8_0 matrices, F32 norms)
    q4_k.gguf         7 layers (Q4_K matrices, F32 norms)

and one of a convolutional network's shapes, which Tensormorph sees as narrow matrices (the last
dimension is the matrix's width: [512*512*3, 3], [512*512, 1]) and 1-D vectors (one row):

    convnet.safetensors  24 blocks of a 3x3 and a 1x1 convolution (512 -> 512) and a bias (F32),
                         about 0.25 GB

Values are N(0, 0.02) floats; quantized blocks are random but valid (small finite fp16 scales).
A file whose size and header already match is kept, so re-running costs nothing.
Needs python3 and numpy only (Debian's python3-numpy).
"""
import json
import os
import struct
import sys

import numpy as np

# ggml type ids and block geometry (elements per block, bytes per block).
GGML = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "BF16": (30, 1, 2)}
SAFETENSORS_ELEMENT_BYTES = {"F32": 4, "BF16": 2, "F16": 2}
GGUF_ALIGNMENT = 32
LAYER = [
    ("attn_q", (4096, 4096)),
    ("attn_k", (4096, 4096)),
    ("attn_v", (4096, 4096)),
    ("attn_o", (4096, 4096)),
    ("ffn_gate", (11008, 4096)),
    ("ffn_up", (11008, 4096)),
    ("ffn_down", (4096, 11008)),
]
NORMS = [("attn_norm", (4096,)), ("ffn_norm", (4096,))]
CONV_BLOCK = [("conv3x3.weight", (512, 512, 3, 3)), ("conv1x1.weight", (512, 512, 1, 1)), ("conv1x1.bias", (512,))]
CHECKPOINTS = [
    ("f32.safetensors", "F32", 1),
    ("bf16.safetensors", "BF16", 2),
    ("f16.safetensors", "F16", 2),
    ("q8_0.gguf", "Q8_0", 4),
    ("q4_k.gguf", "Q4_K", 7),
    ("convnet.safetensors", "F32", 24),
]


def tensor_list(path, dtype, layers):
    """(name, storage dtype, row-major shape) of every tensor of a checkpoint."""
    out = []
    for layer in range(layers):
        if path.endswith("convnet.safetensors"):
            out += [(f"block.{layer}.{name}", dtype, shape) for name, shape in CONV_BLOCK]
            continue
        for name, shape in NORMS:
            out.append((f"blk.{layer}.{name}.weight", "F32" if dtype in ("Q8_0", "Q4_K") else dtype, shape))
        for name, shape in LAYER:
            out.append((f"blk.{layer}.{name}.weight", dtype, shape))
    return out


def storage_bytes(dtype, shape):
    _, block_elems, block_bytes = GGML[dtype]
    elements = int(np.prod(shape))
    assert elements % block_elems == 0, (dtype, shape)
    return elements // block_elems * block_bytes


def values(rng, dtype, shape):
    """The stored bytes of one tensor as a flat uint8 array."""
    elements = int(np.prod(shape))
    if dtype in ("F32", "BF16", "F16"):
        x = rng.standard_normal(elements, dtype=np.float32)
        x *= np.float32(0.02)
        if dtype == "F32":
            return x.view(np.uint8)
        if dtype == "F16":
            return x.astype(np.float16).view(np.uint8)
        return (x.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)  # BF16: truncated float32
    _, block_elems, block_bytes = GGML[dtype]
    blocks = elements // block_elems
    raw = rng.integers(0, 256, size=(blocks, block_bytes), dtype=np.uint8)
    # fp16 d (and dmin for Q4_K) of small finite magnitude. For Q4_K, dmin is 1-32x d: ggml's
    # quantizer sets d = max sub-block scale / 63 and dmin = max sub-block minimum / 63, and for
    # weights centred on zero the minimum (about -2 sigma) outweighs the scale (range / 15), as in
    # ../shared/testdata/gguf-ref/quantized.gguf (dmin's exponent 2 below to 4 above d's).
    if dtype == "Q4_K":
        d = rng.uniform(5e-5, 2e-4, size=blocks).astype(np.float16)
    else:
        d = rng.uniform(1e-4, 1e-3, size=blocks).astype(np.float16)
    raw[:, 0:2] = d.view(np.uint8).reshape(blocks, 2)
    if dtype == "Q8_0":
        raw[:, 2:][raw[:, 2:] == 0x80] = 0x81  # quants in [-127, 127], as ggml's quantizer writes them
    if dtype == "Q4_K":
        dmin = rng.uniform(2e-4, 1.6e-3, size=blocks).astype(np.float16)
        raw[:, 2:4] = dmin.view(np.uint8).reshape(blocks, 2)
    return raw.reshape(-1)


def safetensors_header(tensors):
    header = {"__metadata__": {"format": "pt", "generator": "tensormorph bench"}}
    offset = 0
    for name, dtype, shape in tensors:
        n = storage_bytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    if len(text) & 0xFF == 0x80:
        # A length whose first byte is 0x80 followed by 2..5 also reads as a pickle PROTO opcode;
        # keep the benchmark files unambiguous for format sniffers.
        text += b" " * 8
    return struct.pack("<Q", len(text)) + text, offset


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_header(tensors):
    kvs = [
        gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("llama"),
        gguf_string("general.alignment") + struct.pack("<I", 4) + struct.pack("<I", GGUF_ALIGNMENT),
    ]
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    offset = 0
    for name, dtype, shape in tensors:
        ne = list(reversed(shape))  # GGUF stores ne0 (the fastest dimension) first
        out += gguf_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        out += struct.pack("<IQ", GGML[dtype][0], offset)
        offset += storage_bytes(dtype, shape)
        offset += -offset % GGUF_ALIGNMENT
    out += b"\0" * (-len(out) % GGUF_ALIGNMENT)
    return out, offset


def write_checkpoint(path, dtype, layers, seed):
    tensors = tensor_list(path, dtype, layers)
    is_gguf = path.endswith(".gguf")
    header, data_bytes = gguf_header(tensors) if is_gguf else safetensors_header(tensors)
    if os.path.exists(path) and os.path.getsize(path) == len(header) + data_bytes:
        with open(path, "rb") as f:
            if f.read(len(header)) == header:
                print(f"kept    {path} ({(len(header) + data_bytes) / 1e9:.2f} GB)")
                return
    rng = np.random.default_rng(seed)
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(header)
        for _, tensor_dtype, shape in tensors:
            data = values(rng, tensor_dtype, shape)
            data.tofile(f)
            if is_gguf:
                f.write(b"\0" * (-data.size % GGUF_ALIGNMENT))
    os.replace(tmp, path)
    print(f"wrote   {path} ({(len(header) + data_bytes) / 1e9:.2f} GB)")


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "/tmp/tm-bench"
    wanted = set(sys.argv[2:])
    unknown = wanted - {name for name, _, _ in CHECKPOINTS}
    if unknown:
        sys.exit(f"unknown checkpoint {sorted(unknown)}: the names are {[name for name, _, _ in CHECKPOINTS]}")
    os.makedirs(directory, exist_ok=True)
    for seed, (name, dtype, layers) in enumerate(CHECKPOINTS):
        if not wanted or name in wanted:
            write_checkpoint(os.path.join(directory, name), dtype, layers, seed)


if __name__ == "__main__":
    main()
