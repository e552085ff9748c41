#!/usr/bin/env python3
"""The analyses against numpy, PyTorch and `tensormorph index` on the same warm files.

    python3 bench/analyses_bench.py TENSORMORPH DIR [--threads N] [--numpy-bytes N] [--runs N]

Writes DIR/quantiles-bf16.safetensors (one 1 GiB BF16 tensor, N(0, 0.02)) and
DIR/quantiles-q4_k.gguf (one 1 GiB Q4_K tensor, random valid blocks), reads each into the page
cache, then in one run per file, best of --runs:
  - `tensormorph index` (its own reported time) and `tensormorph quantiles` of 5 probabilities
    (wall time of the whole command, --recompute), as GB/s of stored bytes;
  - `tensormorph outliers -k 100 --recompute`: the measured time of its tm.top_k@1 and of its
    tm.channel_stats@1 operations (placement records), each as GB/s of stored bytes;
  - numpy.quantile of the same 5 probabilities on the decoded float32 values of the first
    --numpy-bytes stored bytes (default: the whole BF16 tensor, 200 MB of Q4_K), timed alone;
  - torch.quantile where PyTorch is installed (it refuses inputs above 2^24 elements: then the
    first 2^24 elements, and the refusal is printed).
Targets: quantiles >= 20x numpy and >= 50% of index throughput; top-k and row/column statistics
>= 70% of index throughput. Needs numpy (Debian's python3-numpy).
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

PROBABILITIES = [0.001, 0.01, 0.5, 0.99, 0.999]
FILES = [("quantiles-bf16.safetensors", "BF16", (16384, 32768)), ("quantiles-q4_k.gguf", "Q4_K", (8192, 233472))]


def write(path, dtype, shape):
    tensors = [("w", dtype, shape)]
    gguf = path.endswith(".gguf")
    header, data_bytes = mk.gguf_header(tensors) if gguf else mk.safetensors_header(tensors)
    if os.path.exists(path) and os.path.getsize(path) >= len(header) + data_bytes:
        return
    data = mk.values(np.random.default_rng(5), dtype, shape)
    with open(path + ".partial", "wb") as f:
        f.write(header)
        data.tofile(f)
    os.replace(path + ".partial", path)


def best(runs, fn):
    return min(fn() for _ in range(runs))


def tool_index_seconds(tm, path, threads, index_path):
    if os.path.exists(index_path):
        os.remove(index_path)
    out = subprocess.run([tm, "index", path, "--threads", str(threads), "--index-path", index_path],
                         check=True, capture_output=True, text=True).stdout
    return float(re.search(r"^time\s+([0-9.]+) s", out, re.M).group(1))


def quantiles_seconds(tm, path, threads):
    start = time.perf_counter()
    out = subprocess.run([tm, "quantiles", path, "--threads", str(threads), "--json", "--recompute", "-p",
                          ",".join(map(str, PROBABILITIES))], check=True, capture_output=True, text=True).stdout
    seconds = time.perf_counter() - start
    quantiles_seconds.last = json.loads(out)["tensors"][0]
    return seconds


def outliers_op_seconds(tm, path, threads):
    """Seconds of tm.top_k@1 and of tm.channel_stats@1 in one `outliers` run (summed per operation)."""
    out = subprocess.run([tm, "outliers", path, "--threads", str(threads), "-k", "100", "--recompute", "--json",
                          "--explain"], check=True, capture_output=True, text=True).stdout
    seconds = {"tm.top_k@1": 0.0, "tm.channel_stats@1": 0.0}
    for record in json.loads(out)["placements"]:
        if record["op"] in seconds:
            seconds[record["op"]] += record["measured_ms"] / 1e3
    return seconds


def decoded_prefix(path, limit):
    tensors = peer.read_gguf(path) if path.endswith(".gguf") else peer.read_safetensors(path)
    t = tensors[0]
    nbytes = min(t.nbytes, limit) // t.block_bytes * t.block_bytes
    raw = np.fromfile(path, dtype=np.uint8, count=nbytes, offset=t.offset)
    return peer.decode(t.dtype, raw), nbytes, t.nbytes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tensormorph")
    parser.add_argument("dir")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--numpy-bytes", type=int, default=0, help="stored bytes numpy ranks (0: 1 GiB BF16, 200 MB Q4_K)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    try:
        import torch
    except ImportError:
        torch = None
    print(f"machine: {os.cpu_count()} cores, threads {args.threads}, numpy {np.__version__}"
          f"{', torch ' + torch.__version__ if torch else ', no torch'}")
    rows = []
    for name, dtype, shape in FILES:
        path = os.path.join(args.dir, name)
        write(path, dtype, shape)
        with open(path, "rb") as f:
            while f.read(64 << 20):
                pass
        index_s = best(args.runs, lambda: tool_index_seconds(args.tensormorph, path, args.threads, path + ".bench-index"))
        os.remove(path + ".bench-index")
        q_s = best(args.runs, lambda: quantiles_seconds(args.tensormorph, path, args.threads))
        ops = [outliers_op_seconds(args.tensormorph, path, args.threads) for _ in range(args.runs)]
        top_k_s = min(o["tm.top_k@1"] for o in ops)
        channels_s = min(o["tm.channel_stats@1"] for o in ops)
        limit = args.numpy_bytes or (1 << 30 if dtype == "BF16" else 200_000_000)
        x, numpy_bytes, stored = decoded_prefix(path, limit)
        numpy_s = best(args.runs, lambda: (lambda t0: (np.quantile(x, PROBABILITIES), time.perf_counter() - t0)[1])(
            time.perf_counter()))
        torch_text = "not installed"
        if torch is not None:
            tx = torch.from_numpy(x)
            try:
                torch.quantile(tx, torch.tensor(PROBABILITIES))
                n, t_bytes = tx.numel(), numpy_bytes
            except RuntimeError as e:
                print(f"torch.quantile on {tx.numel()} elements: {str(e).splitlines()[0]}")
                n = 1 << 24
                t_bytes = numpy_bytes * n // tx.numel()
            sub = tx[:n]
            qs = torch.tensor(PROBABILITIES)
            torch_s = best(args.runs, lambda: (lambda t0: (torch.quantile(sub, qs), time.perf_counter() - t0)[1])(
                time.perf_counter()))
            torch_text = f"{t_bytes / torch_s / 1e9:.3f} ({n} elements)"
        del x
        index_gbps = stored / index_s / 1e9
        q_gbps = stored / q_s / 1e9
        numpy_gbps = numpy_bytes / numpy_s / 1e9
        passes = quantiles_seconds.last["passes"]
        rows.append((dtype, stored, index_gbps, q_gbps, passes, numpy_gbps, torch_text,
                     stored / top_k_s / 1e9, stored / channels_s / 1e9))
        print(f"{dtype}: median {quantiles_seconds.last['median']} in {passes} passes")
    print()
    print("| tensor | GB | index GB/s | quantiles GB/s (passes) | of index | target | numpy GB/s | quantiles / numpy | target | torch GB/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for dtype, stored, index_gbps, q_gbps, passes, numpy_gbps, torch_text, _, _ in rows:
        of_index = q_gbps / index_gbps
        vs_numpy = q_gbps / numpy_gbps
        print(f"| {dtype} | {stored / 1e9:.2f} | {index_gbps:.2f} | {q_gbps:.2f} ({passes}) | {of_index:.2f} "
              f"{'met' if of_index >= 0.5 else 'MISSED'} | 0.50 | {numpy_gbps:.3f} | {vs_numpy:.1f}x "
              f"{'met' if vs_numpy >= 20 else 'MISSED'} | 20x | {torch_text} |")

    print()
    print("| tensor | index GB/s | top-k (k=100) GB/s | of index | row/col statistics GB/s | of index | target |")
    print("|---|---|---|---|---|---|---|")
    for dtype, _, index_gbps, _, _, _, _, top_k_gbps, channels_gbps in rows:
        a, b = top_k_gbps / index_gbps, channels_gbps / index_gbps
        print(f"| {dtype} | {index_gbps:.2f} | {top_k_gbps:.2f} | {a:.2f} {'met' if a >= 0.7 else 'MISSED'} | "
              f"{channels_gbps:.2f} | {b:.2f} {'met' if b >= 0.7 else 'MISSED'} | 0.70 |")


if __name__ == "__main__":
    main()
