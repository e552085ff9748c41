#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into fuzz/corpus/<target>/ (small files only).

Seeds come from ../shared/testdata (real checkpoints, shrunk: the same names, dtypes, metadata and
header layout, with every tensor cut to a few elements) and from tests/fixtures. Run from the
repository root; safe to re-run (files are named by content hash, existing ones are kept)."""
import hashlib
import io
import json
import os
import struct
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "..", "shared", "testdata")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(ROOT, "fuzz", "corpus")

ST_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "U16": 2, "I16": 2,
            "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8, "C64": 8}


def put(target, data):
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(OUT, target, name), "wb") as f:
        f.write(data)


def safetensors_bytes(header):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    size = 0
    for name, entry in header.items():
        if name != "__metadata__":
            size = max(size, entry["data_offsets"][1])
    return struct.pack("<Q", len(text)) + text + bytes(range(256)) * (size // 256) + bytes(size % 256)


def shrink_safetensors(path, max_tensors=24):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    out, offset = {}, 0
    if "__metadata__" in header:
        out["__metadata__"] = header["__metadata__"]
    for name, entry in list((k, v) for k, v in header.items() if k != "__metadata__")[:max_tensors]:
        shape = [min(d, 2) for d in entry["shape"]]
        count = 1
        for d in shape:
            count *= d
        size = count * ST_SIZES.get(entry["dtype"], 1)
        out[name] = {"dtype": entry["dtype"], "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    return safetensors_bytes(out)


def safetensors_seeds():
    for name in ["real/dfdx_mnist.safetensors", "real/peft-gpt2_adapter_model.safetensors",
                 "real/hqqsvd_test_bf16.safetensors", "gguf-ref/dequantized.safetensors"]:
        put("safetensors", shrink_safetensors(os.path.join(TESTDATA, name)))
    put("safetensors", safetensors_bytes({
        "__metadata__": {"format": "pt", "note": "caf\u00e9"},
        "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
        "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]},
        "e": {"dtype": "I64", "shape": [0], "data_offsets": [22, 22]},
        "f": {"dtype": "F4", "shape": [4], "data_offsets": [22, 24]},
        "s": {"dtype": "U8", "shape": [], "data_offsets": [24, 25]}}))


def index_seeds():
    first, second = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    put("safetensors_index", json.dumps({"metadata": {"total_size": 32},
        "weight_map": {"a.weight": first, "a.bias": first, "b.weight": second}}, indent=2).encode())
    put("safetensors_index", json.dumps({"weight_map": {"a.weight": first, "a.bias": first}}).encode())
    put("safetensors_index", json.dumps({"metadata": {}, "weight_map": {"a.weight": second, "x": first,
        "b.weight": "../" + second}}).encode())


def gguf_string(s):
    return struct.pack("<Q", len(s)) + s


def read_gguf_header(data):
    """(version, kv bytes, [(name, dims, type)]) of a GGUF file; values are kept as raw bytes."""
    pos = 4
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, pos)
    pos += 20
    fixed = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(t, pos):
        if t in fixed:
            return pos + fixed[t]
        if t == 8:
            return pos + 8 + struct.unpack_from("<Q", data, pos)[0]
        et, count = struct.unpack_from("<IQ", data, pos)
        pos += 12
        for _ in range(count):
            pos = skip(et, pos)
        return pos
    kv_start = pos
    for _ in range(n_kv):
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]
        t = struct.unpack_from("<I", data, pos)[0]
        pos = skip(t, pos + 4)
    kvs = data[kv_start:pos]
    tensors = []
    for _ in range(n_tensors):
        length = struct.unpack_from("<Q", data, pos)[0]
        name = data[pos + 8:pos + 8 + length]
        pos += 8 + length
        n_dims = struct.unpack_from("<I", data, pos)[0]
        dims = struct.unpack_from("<%dQ" % n_dims, data, pos + 4)
        pos += 4 + 8 * n_dims
        t = struct.unpack_from("<I", data, pos)[0]
        pos += 12
        tensors.append((name, dims, t))
    return version, n_kv, kvs, tensors


# ggml type id -> (block elements, block bytes) for the types the seeds use.
GGML_BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
               10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2)}


def shrink_gguf(path, max_tensors=16):
    """Keeps the metadata (alignment 32 assumed) and gives each tensor one block per row."""
    with open(path, "rb") as f:
        data = f.read()
    version, n_kv, kvs, tensors = read_gguf_header(data)
    tensors = [t for t in tensors if t[2] in GGML_BLOCKS][:max_tensors]
    infos, offset = b"", 0
    for name, dims, t in tensors:
        block, nbytes = GGML_BLOCKS[t]
        new_dims = [block] + [min(d, 2) for d in dims[1:]]
        count = 1
        for d in new_dims[1:]:
            count *= d
        infos += gguf_string(name) + struct.pack("<I", len(new_dims)) + struct.pack("<%dQ" % len(new_dims), *new_dims)
        infos += struct.pack("<IQ", t, offset)
        offset += (count * nbytes + 31) // 32 * 32
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), n_kv) + kvs + infos
    head += bytes(-len(head) % 32)
    return head + bytes((i * 37) & 0xFF for i in range(offset))


def gguf_seeds():
    for name in ["real/stories260K.gguf", "gguf-ref/stories260K-Q4_K_M.gguf", "gguf-ref/quantized.gguf"]:
        put("gguf", shrink_gguf(os.path.join(TESTDATA, name)))
    for name in sorted(os.listdir(os.path.join(TESTDATA, "negative"))):
        with open(os.path.join(TESTDATA, "negative", name), "rb") as f:
            put("gguf", f.read())


def zip_and_pickle_seeds():
    directory = os.path.join(FIXTURES, "pytorch")
    # The per-rank archives of ShardedTensors (FSDP) too: their pickles reach the ShardedTensor reading.
    sharded = [os.path.join(FIXTURES, "sharded", d, "rank0.pt") for d in ("fsdp_local", "fsdp_sharded")]
    for path in [os.path.join(directory, name) for name in sorted(os.listdir(directory))] + sharded:
        name = os.path.basename(path)
        if name.endswith(".json") or name.endswith(".py"):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < 8192:
            put("zip", data)
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                for info in z.infolist():
                    if info.filename.endswith("data.pkl"):
                        put("pickle", z.read(info))
        except (zipfile.BadZipFile, RuntimeError, EOFError, ValueError):
            if name.endswith(".pkl"):
                put("pickle", data)
    import pickle
    import collections
    values = [{"a": 1, "b": [1.5, None, True], "c": (b"x", "y" * 3)}, collections.OrderedDict(k=[1, 2]),
              {1 << 70: -1, "s": {1, 2}, "f": frozenset([3])}]
    for protocol in range(0, 6):
        for value in values:
            put("pickle", pickle.dumps(value, protocol=protocol))


if __name__ == "__main__":
    safetensors_seeds()
    index_seeds()
    gguf_seeds()
    zip_and_pickle_seeds()
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(OUT) for f in fs)
    print("corpus: %d bytes in %s" % (total, OUT), file=sys.stderr)
