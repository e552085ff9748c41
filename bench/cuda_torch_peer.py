#!/usr/bin/env python3
"""The PyTorch peer of bench/cuda_tile_stats_bench: the same per-tensor statistics (min, max, mean,
std, absmax, NaN and Inf counts, over the finite values) on the same BF16 tensor, on the same GPU.

Usage: cuda_torch_peer.py PATH.safetensors [--reps N] [--json OUT]

Two versions are timed (median of N, CUDA events, after a warm-up):
  masked  - the straightforward code: finite values selected with a mask, float64 statistics;
  fused   - no boolean indexing: non-finite values replaced, float32 accumulation, one pass each.
The ratio in docs/PERFORMANCE.md uses the faster of the two.
"""
import argparse
import json
import statistics

import torch
from safetensors.torch import load_file


def stats_masked(x):
    nan = torch.isnan(x).sum()
    inf = torch.isinf(x).sum()
    v = x[torch.isfinite(x)].double()
    return nan, inf, v.min(), v.max(), v.mean(), v.std(), v.abs().max()


def stats_fused(x):
    finite = torch.isfinite(x)
    nan = torch.isnan(x).sum()
    inf = x.numel() - finite.sum() - nan
    f = x.float()
    zero = torch.zeros((), dtype=torch.float32, device=x.device)
    vals = torch.where(finite, f, zero)
    n = finite.sum()
    s = vals.sum(dtype=torch.float64)
    sq = (vals * vals).sum(dtype=torch.float64)
    mean = s / n
    std = torch.sqrt((sq - s * mean) / (n - 1))
    lo = torch.where(finite, f, torch.full((), float("inf"), device=x.device)).min()
    hi = torch.where(finite, f, torch.full((), float("-inf"), device=x.device)).max()
    return nan, inf, lo, hi, mean, std, torch.maximum(hi.abs(), lo.abs())


def time_ms(fn, x, reps):
    fn(x)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        out = fn(x)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
        del out
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--json", default="")
    args = p.parse_args()
    tensors = load_file(args.path)
    (name, x), = tensors.items()
    x = x.cuda()
    assert x.dtype == torch.bfloat16, x.dtype
    nbytes = x.numel() * x.element_size()
    result = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "tensor": name,
              "shape": list(x.shape), "bytes": nbytes}
    for label, fn in (("masked", stats_masked), ("fused", stats_fused)):
        ms = time_ms(fn, x, args.reps)
        values = [float(v) for v in fn(x)]
        result[label] = {"ms": ms, "gbps": nbytes / (ms * 1e6),
                         "nan,inf,min,max,mean,std,absmax": values}
        print(f"torch {label:6s}: {ms:8.3f} ms  {nbytes / (ms * 1e6):8.1f} GB/s  "
              f"min {values[2]:.6g} max {values[3]:.6g} mean {values[4]:.6g} std {values[5]:.6g}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
