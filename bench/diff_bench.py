#!/usr/bin/env python3
"""`tensormorph diff` against `tensormorph index` and a numpy peer on the same warm files.

    python3 bench/diff_bench.py TENSORMORPH DIR [--threads N] [--runs N] [--tensors N] [--numpy-bytes N]

Writes into DIR three checkpoints of --tensors (default 32) matrices [4096, 11008]:
  - diff-q4_k.gguf: random valid Q4_K blocks (about 0.8 GB);
  - diff-a.safetensors: its twin, the Q4_K values decoded and rounded to BF16 (about 2.9 GB);
  - diff-b.safetensors: a fine-tune-like BF16 copy of A, every fourth tensor unchanged and the
    others A + N(0, 1e-3) rounded to BF16.
After reading each into the page cache, best of --runs:
  - `tensormorph index A` (its own reported time) as GB/s of A's bytes;
  - `tensormorph diff A B` and `tensormorph diff A Q`: wall time of the command and the measured
    time of its tm.diff_stats@1 operations (placement records), as GB/s of the bytes of both inputs;
  - numpy computing the same per-tensor figures (max |a-b| and where, RMSE, relative Frobenius,
    cosine, differing count, on float64 values) on the first --numpy-bytes of pairs, timed alone.
Targets: diff >= 80% of index throughput, >= 20x numpy. Needs numpy (python3-numpy).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_bench_checkpoints as mk  # noqa: E402
import numpy_stats_peer as peer  # noqa: E402

SHAPE = (4096, 11008)


def names(count):
    return [f"blk.{i // 4}.w{i % 4}.weight" for i in range(count)]


def complete(path, header, data_bytes):
    return os.path.exists(path) and os.path.getsize(path) >= len(header) + data_bytes


def bf16_of(x):
    """float32 -> BF16 bits, round to nearest even (finite inputs)."""
    u = x.view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_files(directory, count):
    tensor_names = names(count)
    q_path = os.path.join(directory, "diff-q4_k.gguf")
    a_path = os.path.join(directory, "diff-a.safetensors")
    b_path = os.path.join(directory, "diff-b.safetensors")
    q_header, q_bytes = mk.gguf_header([(n, "Q4_K", SHAPE) for n in tensor_names])
    a_header, a_bytes = mk.safetensors_header([(n, "BF16", SHAPE) for n in tensor_names])
    if complete(q_path, q_header, q_bytes) and complete(a_path, a_header, a_bytes) and complete(b_path, a_header, a_bytes):
        return a_path, b_path, q_path
    rng = np.random.default_rng(11)
    with open(q_path + ".partial", "wb") as fq, open(a_path + ".partial", "wb") as fa, \
            open(b_path + ".partial", "wb") as fb:
        fq.write(q_header)
        fa.write(a_header)
        fb.write(a_header)
        for i, _ in enumerate(tensor_names):
            raw = mk.values(rng, "Q4_K", SHAPE)
            raw.tofile(fq)
            fq.write(b"\0" * (-raw.size % mk.GGUF_ALIGNMENT))
            a = peer.decode("Q4_K", raw)
            a_bits = bf16_of(np.ascontiguousarray(a))
            a_bits.tofile(fa)
            if i % 4 == 0:
                a_bits.tofile(fb)
            else:
                a32 = (a_bits.astype(np.uint32) << 16).view(np.float32)
                noise = rng.standard_normal(a32.size, dtype=np.float32) * np.float32(1e-3)
                bf16_of(a32 + noise).tofile(fb)
    for p in (q_path, a_path, b_path):
        os.replace(p + ".partial", p)
    return a_path, b_path, q_path


def warm(path):
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def best(runs, fn):
    return min(fn() for _ in range(runs))


def index_seconds(tm, path, threads):
    index_path = path + ".bench-index"
    if os.path.exists(index_path):
        os.remove(index_path)
    out = subprocess.run([tm, "index", path, "--threads", str(threads), "--index-path", index_path],
                         check=True, capture_output=True, text=True).stdout
    os.remove(index_path)
    return float(re.search(r"^time\s+([0-9.]+) s", out, re.M).group(1))


def diff_seconds(tm, a, b, threads):
    """(wall seconds, seconds of tm.diff_stats@1 operations) of one `diff A B --json --explain`."""
    start = time.perf_counter()
    out = subprocess.run([tm, "diff", a, b, "--threads", str(threads), "--json", "--explain"],
                         check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - start
    doc = json.loads(out)
    diff_seconds.last = doc
    op = sum(r["measured_ms"] for r in doc["placements"] if r["op"] == "tm.diff_stats@1") / 1e3
    return wall, op


def numpy_figures(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    d = a - b
    absd = np.abs(d)
    at = int(np.argmax(absd))
    sq = float(np.dot(d, d))
    na, nb = float(np.dot(a, a)), float(np.dot(b, b))
    return {"max_abs": float(absd[at]), "at": at, "rmse": (sq / d.size) ** 0.5, "rel_fro": (sq / na) ** 0.5,
            "cosine": float(np.dot(a, b)) / (na * nb) ** 0.5, "differing": int(np.count_nonzero(d))}


def numpy_gbps(a_path, b_path, limit, runs):
    """GB/s (stored bytes of both inputs) of numpy's per-tensor figures over the first tensors."""
    ta = peer.read_gguf(a_path) if a_path.endswith(".gguf") else peer.read_safetensors(a_path)
    tb = peer.read_gguf(b_path) if b_path.endswith(".gguf") else peer.read_safetensors(b_path)
    pairs, total = [], 0
    for x, y in zip(ta, tb):
        if total >= limit:
            break
        ra = np.fromfile(a_path, dtype=np.uint8, count=x.nbytes, offset=x.offset)
        rb = np.fromfile(b_path, dtype=np.uint8, count=y.nbytes, offset=y.offset)
        pairs.append((x.dtype, ra, y.dtype, rb))
        total += x.nbytes + y.nbytes

    def once():
        start = time.perf_counter()
        for da, ra, db, rb in pairs:
            numpy_figures(peer.decode(da, ra), peer.decode(db, rb))
        return time.perf_counter() - start
    return total / best(runs, once) / 1e9, pairs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tensormorph")
    parser.add_argument("dir")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tensors", type=int, default=32)
    parser.add_argument("--numpy-bytes", type=int, default=600_000_000, help="stored bytes of pairs numpy compares")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    a, b, q = write_files(args.dir, args.tensors)
    for p in (a, b, q):
        warm(p)
    print(f"machine: {os.cpu_count()} cores, threads {args.threads}, numpy {np.__version__}")
    a_bytes = os.path.getsize(a)
    index_gbps = a_bytes / best(args.runs, lambda: index_seconds(args.tensormorph, a, args.threads)) / 1e9
    rows = []
    for label, other in (("BF16 vs BF16 fine-tune", b), ("BF16 vs Q4_K twin", q)):
        runs = [diff_seconds(args.tensormorph, a, other, args.threads) for _ in range(args.runs)]
        both = a_bytes + os.path.getsize(other)
        wall_gbps = both / min(r[0] for r in runs) / 1e9
        op_gbps = both / min(r[1] for r in runs) / 1e9
        doc = diff_seconds.last
        np_gbps, pairs = numpy_gbps(a, other, args.numpy_bytes, args.runs)
        # The tool's figures must be numpy's (to rounding) on the tensors numpy computed.
        by_name = {t["a"]: t for t in doc["tensors"]}
        ta = peer.read_gguf(a) if a.endswith(".gguf") else peer.read_safetensors(a)
        for (da, ra, db, rb), info in zip(pairs, ta):
            ref = numpy_figures(peer.decode(da, ra), peer.decode(db, rb))
            got = by_name[info.name]
            if ref["max_abs"] > 0 and got["max_abs_at"]["index"] != ref["at"]:
                raise SystemExit(f"{info.name}: max at {got['max_abs_at']['index']}, numpy {ref['at']}")
            if abs(got["rmse"] - ref["rmse"]) > 1e-9 * max(ref["rmse"], 1e-30) or got["differing"] != ref["differing"]:
                raise SystemExit(f"{info.name}: tool {got['rmse']} / {got['differing']}, numpy {ref['rmse']} / {ref['differing']}")
        rows.append((label, both, wall_gbps, op_gbps, np_gbps))
    print()
    print("| pair | GB (both) | index GB/s | diff GB/s (wall) | of index | diff_stats GB/s (op) | of index | target | "
          "numpy GB/s | diff / numpy | target |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, both, wall_gbps, op_gbps, np_gbps in rows:
        w, o, n = wall_gbps / index_gbps, op_gbps / index_gbps, wall_gbps / np_gbps
        print(f"| {label} | {both / 1e9:.2f} | {index_gbps:.2f} | {wall_gbps:.2f} | {w:.2f} {'met' if w >= 0.8 else 'MISSED'} | "
              f"{op_gbps:.2f} | {o:.2f} | 0.80 | {np_gbps:.3f} | {n:.1f}x {'met' if n >= 20 else 'MISSED'} | 20x |")


if __name__ == "__main__":
    main()
