"""numpy's singular values of every 2-D tensor of a safetensors file (F32, F16, BF16), as JSON.

The independent reference of tests/spectrum_test.cpp: for each matrix, its values as float64 and
numpy.linalg.svd(compute_uv=False), descending.

usage: numpy_spectrum.py FILE
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numpy_quantiles import tensors  # noqa: E402  (the same reader of safetensors files)


def main():
    shapes = {}
    with open(sys.argv[1], "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        for name, info in json.loads(f.read(size)).items():
            if name != "__metadata__":
                shapes[name] = info["shape"]
    out = {}
    for name, x in tensors(sys.argv[1]):
        if len(shapes[name]) == 2:
            out[name] = np.linalg.svd(x.reshape(shapes[name]), compute_uv=False).tolist()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
