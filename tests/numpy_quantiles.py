"""numpy's quantiles of every tensor of a safetensors file (F32, F16, BF16, I8, U8), as JSON.

The independent reference of tests/quantiles_test.cpp: for each tensor, the finite values as
float64, numpy.quantile under "linear" (the default) and "inverted_cdf", the median, the robust
range (linear at 0.001 and 0.999) and the median absolute deviation.

usage: numpy_quantiles.py FILE P[,P...]
"""
import json
import struct
import sys

import numpy as np


def tensors(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = data[begin:end]
        dtype = info["dtype"]
        if dtype == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            values = bits.view(np.float32)
        else:
            values = np.frombuffer(raw, dtype={"F32": "<f4", "F16": "<f2", "I8": "i1", "U8": "u1"}[dtype])
        yield name, values.astype(np.float64)


def main():
    path, probabilities = sys.argv[1], [float(p) for p in sys.argv[2].split(",")]
    out = {}
    for name, x in tensors(path):
        finite = x[np.isfinite(x)]
        entry = {"finite": int(finite.size), "nan": int(np.isnan(x).sum()),
                 "pos_inf": int(np.isposinf(x).sum()), "neg_inf": int(np.isneginf(x).sum())}
        if finite.size:
            entry["linear"] = [float(v) for v in np.quantile(finite, probabilities)]
            entry["inverted_cdf"] = [float(v) for v in np.quantile(finite, probabilities, method="inverted_cdf")]
            median = np.quantile(finite, 0.5)
            entry["median"] = float(median)
            entry["robust_range"] = [float(v) for v in np.quantile(finite, [0.001, 0.999])]
            entry["median_absolute_deviation"] = float(np.quantile(np.abs(finite - median), 0.5))
        out[name] = entry
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
