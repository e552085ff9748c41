#!/usr/bin/env python3
"""The numpy peer of `tensormorph index` (issue 4): per-tensor count, min, max, mean, std, absmax,
NaN, Inf and zero counts over np.memmap views of safetensors and GGUF files, single-threaded.

    python3 bench/numpy_stats_peer.py [--variant chunked|per-stat] [--chunk ELEMS] [--repeat N]
                                      [--limit-bytes N] [--print] FILE...

Prints "variant chunk bytes seconds GB/s" (GB/s of stored checkpoint bytes, best of --repeat) and,
with --print, the statistics of each tensor.

  chunked   one pass over each tensor in chunks of --chunk elements (cache-sized), each chunk
            decoded to float32 once and reduced by a handful of numpy calls while it is in cache
  per-stat  the tensor decoded once, then one numpy call per statistic (min, max, mean, std,
            absmax, isnan, isinf, == 0), each a full pass over memory

Storage types: F32, F16, BF16 (safetensors or GGUF), Q8_0 and Q4_K (GGUF), decoded exactly as
ggml does (float32 arithmetic in the same order).
"""
import argparse
import json
import struct
import sys
import time

import numpy as np

GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 8: ("Q8_0", 32, 34), 12: ("Q4_K", 256, 144), 30: ("BF16", 1, 2)}
SAFETENSORS_TYPES = {"F32": ("F32", 1, 4), "F16": ("F16", 1, 2), "BF16": ("BF16", 1, 2)}


class Tensor:
    def __init__(self, name, dtype, block_elems, block_bytes, elements, offset):
        self.name, self.dtype, self.block_elems, self.block_bytes = name, dtype, block_elems, block_bytes
        self.elements, self.offset = elements, offset
        self.nbytes = elements // block_elems * block_bytes


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    out = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype, be, bb = SAFETENSORS_TYPES[entry["dtype"]]
        elements = int(np.prod(entry["shape"], dtype=np.int64))
        out.append(Tensor(name, dtype, be, bb, elements, 8 + n + entry["data_offsets"][0]))
    return out


def read_gguf(path):
    with open(path, "rb") as f:
        data = f.read(16 << 20)
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    def string():
        nonlocal pos
        (n,) = take("Q")
        s = data[pos:pos + n].decode()
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            (inner, count) = take("IQ")
            return [value(inner) for _ in range(count)]
        return take(scalar[t])[0]

    magic = data[:4]
    pos = 4
    if magic != b"GGUF":
        raise SystemExit(f"{path}: not a GGUF file")
    version, n_tensors, n_kv = take("IQQ")
    alignment = 32
    for _ in range(n_kv):
        key = string()
        (t,) = take("I")
        v = value(t)
        if key == "general.alignment":
            alignment = v
    infos = []
    for _ in range(n_tensors):
        name = string()
        (n_dims,) = take("I")
        ne = take(f"{n_dims}Q")
        ggml_type, offset = take("IQ")
        infos.append((name, ne, ggml_type, offset))
    data_start = pos + (-pos % alignment)
    out = []
    for name, ne, ggml_type, offset in infos:
        dtype, be, bb = GGML_TYPES[ggml_type]
        out.append(Tensor(name, dtype, be, bb, int(np.prod(ne, dtype=np.int64)), data_start + offset))
    return out


def decode(dtype, raw):
    """Stored bytes (uint8, whole blocks) -> float32 values."""
    if dtype == "F32":
        return raw.view(np.float32)
    if dtype == "F16":
        return raw.view(np.float16).astype(np.float32)
    if dtype == "BF16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if dtype == "Q8_0":
        blocks = raw.reshape(-1, 34)
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        return (blocks[:, 2:].view(np.int8).astype(np.float32) * d).reshape(-1)
    if dtype == "Q4_K":
        blocks = raw.reshape(-1, 144)
        n = blocks.shape[0]
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
        s = blocks[:, 4:16].astype(np.uint32)
        scale = np.empty((n, 8), np.uint32)
        minimum = np.empty((n, 8), np.uint32)
        scale[:, :4] = s[:, 0:4] & 63
        minimum[:, :4] = s[:, 4:8] & 63
        scale[:, 4:] = (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)
        minimum[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
        qs = blocks[:, 16:].reshape(n, 4, 1, 32)
        nibbles = np.concatenate([qs & 0xF, qs >> 4], axis=2).reshape(n, 8, 32).astype(np.float32)
        dl = (d * scale.astype(np.float32))[:, :, None]
        ml = (dmin * minimum.astype(np.float32))[:, :, None]
        return (dl * nibbles - ml).reshape(-1)
    raise SystemExit(f"unsupported storage type {dtype}")


class Accumulator:
    """Exact merge of chunk statistics (finite values only in min/max/sum)."""

    def __init__(self):
        self.count = self.nan = self.inf = self.zeros = 0
        self.sum = self.sum_sq = 0.0
        self.min, self.max = np.inf, -np.inf

    def add(self, x):
        self.count += x.size
        lo, hi = x.min(), x.max()  # NaN propagates: finite extremes prove every value finite
        if not (np.isfinite(lo) and np.isfinite(hi)):
            nan = np.isnan(x)
            inf = np.isinf(x)
            self.nan += int(np.count_nonzero(nan))
            self.inf += int(np.count_nonzero(inf))
            x = x[~(nan | inf)]
            if x.size == 0:
                return
            lo, hi = x.min(), x.max()
        self.min, self.max = min(self.min, float(lo)), max(self.max, float(hi))
        x64 = x.astype(np.float64)
        self.sum += float(x64.sum())
        self.sum_sq += float(np.dot(x64, x64))
        self.zeros += x.size - int(np.count_nonzero(x))

    def result(self):
        finite = self.count - self.nan - self.inf
        mean = self.sum / finite if finite else float("nan")
        var = max(self.sum_sq / finite - mean * mean, 0.0) if finite else float("nan")
        return {"count": self.count, "min": self.min, "max": self.max, "mean": mean, "std": var ** 0.5,
                "absmax": max(abs(self.min), abs(self.max)), "nan": self.nan, "inf": self.inf, "zeros": self.zeros}


def stats_chunked(mm, t, chunk_elems):
    acc = Accumulator()
    step = max(1, chunk_elems // t.block_elems) * t.block_bytes
    raw = mm[t.offset:t.offset + t.nbytes]
    for at in range(0, t.nbytes, step):
        acc.add(decode(t.dtype, raw[at:at + step]))
    return acc.result()


def stats_per_stat(mm, t):
    x = decode(t.dtype, mm[t.offset:t.offset + t.nbytes])
    nan = int(np.count_nonzero(np.isnan(x)))
    inf = int(np.count_nonzero(np.isinf(x)))
    finite = x if nan + inf == 0 else x[np.isfinite(x)]
    return {"count": x.size, "min": float(finite.min()), "max": float(finite.max()),
            "mean": float(finite.mean(dtype=np.float64)), "std": float(finite.std(dtype=np.float64)),
            "absmax": float(np.abs(finite).max()), "nan": nan, "inf": inf,
            "zeros": int(np.count_nonzero(x == 0))}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    p.add_argument("--variant", choices=["chunked", "per-stat"], default="chunked")
    p.add_argument("--chunk", type=int, default=1 << 16, help="elements per chunk (chunked variant)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--limit-bytes", type=int, default=0, help="only the first tensors, up to this many bytes")
    p.add_argument("--print", action="store_true", help="print each tensor's statistics as JSON lines")
    a = p.parse_args()
    plans = []
    taken = 0
    for path in a.files:
        tensors = read_gguf(path) if path.endswith(".gguf") else read_safetensors(path)
        if a.limit_bytes:
            kept = []
            for t in tensors:
                if taken >= a.limit_bytes:
                    break
                kept.append(t)
                taken += t.nbytes
            tensors = kept
        plans.append((np.memmap(path, dtype=np.uint8, mode="r"), tensors))
    total = sum(t.nbytes for _, ts in plans for t in ts)
    best = float("inf")
    for _ in range(a.repeat):
        results = []
        start = time.perf_counter()
        for mm, tensors in plans:
            for t in tensors:
                s = stats_chunked(mm, t, a.chunk) if a.variant == "chunked" else stats_per_stat(mm, t)
                results.append((t.name, s))
        best = min(best, time.perf_counter() - start)
    if a.print:
        for name, s in results:
            print(json.dumps({"name": name, **s}))
    chunk = a.chunk if a.variant == "chunked" else 0
    print(f"{a.variant} {chunk} {total} {best:.4f} {total / best / 1e9:.3f}")


if __name__ == "__main__":
    sys.exit(main())
