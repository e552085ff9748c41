"""Spectra end to end against the peers people use, in one run, on the same matrices.

  cpu: `tensormorph spectrum --compute only=cpu` on 4096 x 4096 and 11008 x 4096 float32 matrices
       against numpy.linalg.svd(compute_uv=False) in float64. Target: >= 1.5 times faster, the same
       accuracy (every value within the stated bound of numpy's).
  gpu: every 2-D matrix of a Llama-7B-shaped model (32 blocks x q, k, v, o 4096 x 4096, gate and up
       11008 x 4096, down 4096 x 11008; BF16) through `tensormorph spectrum --compute prefer=cuda`,
       against a torch.linalg.svdvals loop on the GPU over the same matrices. Target: < 60 s end to
       end and >= 4 times faster than the loop.

Each `tensormorph` run is timed as a whole process (open, decode, upload, solve, metrics, output);
the peers are timed from the matrices in memory. `--rung gram` runs the Gram rung (consented) instead
of the exact SVD; `--blocks` and `--peer-blocks` take the first N blocks (the peer's loop over the
matrices it shares with the run is then compared per matrix). Prints one line per measurement and
the ratios.

usage: spectrum_bench.py BINARY {cpu|gpu} [--rung exact|gram] [--blocks N] [--peer-blocks N]
                         [--plugins DIR] [--workdir DIR] [--small]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def write_safetensors(path, tensors):
    """tensors: list of (name, dtype 'F32'|'BF16', shape, raw bytes)."""
    header, offset = {}, 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    blob = json.dumps(header).encode()
    blob += b" " * ((8 - len(blob) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little"))
        f.write(blob)
        for _, _, _, raw in tensors:
            f.write(raw)


def bf16_values(raw, shape):
    return (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)


def run_tensormorph(binary, path, compute, rung, plugins, workdir):
    env = dict(os.environ)
    args = [binary, "spectrum", path, "--json", "--recompute", "--explain", "--compute", compute]
    if plugins:
        args += ["--plugin-dir", plugins]
    if rung != "exact":
        # The Gram rung needs consent: a time budget no exact spectrum meets puts it on offer.
        settings = os.path.join(workdir, "settings.json")
        with open(settings, "w") as f:
            json.dump({"compute": {"time_budget_seconds": 1e-9}}, f)
        env["TENSORMORPH_CONFIG"] = settings
        args += ["--consent", rung]
    start = time.perf_counter()
    out = subprocess.run(args, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        sys.exit(f"tensormorph failed ({out.returncode}): {out.stderr[-2000:]}")
    result = json.loads(out.stdout)
    placed, measured = {}, {}
    for p in result.get("placements", []):
        placed[p["backend"]] = placed.get(p["backend"], 0) + 1
        measured[p["backend"]] = measured.get(p["backend"], 0.0) + p.get("measured_ms", 0.0) / 1e3
    print(f"tensormorph placed: {', '.join(f'{n} on {b} ({measured[b]:.1f} s in the operations)' for b, n in sorted(placed.items()))}")
    return seconds, {t["name"]: t for t in result["tensors"]}


def accuracy(got, want):
    """Largest |ours - peer| over our stated bound, and the largest relative to sigma_1."""
    worst_bound, worst_rel = 0.0, 0.0
    values, bounds = np.array(got["values"], dtype=np.float64), np.array(got["bounds"], dtype=np.float64)
    diff = np.abs(values - want[: len(values)])
    worst_rel = float(diff.max() / want[0]) if want[0] > 0 else 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(bounds > 0, diff / bounds, np.where(diff > 0, np.inf, 0.0))
    worst_bound = float(ratio.max())
    return worst_bound, worst_rel


def cpu(args):
    rng = np.random.default_rng(7)
    scale = 8 if args.small else 1
    shapes = [("square", (4096 // scale, 4096 // scale)), ("tall", (11008 // scale, 4096 // scale))]
    mats = {name: rng.standard_normal(shape, dtype=np.float32) * 0.02 for name, shape in shapes}
    path = os.path.join(args.workdir, "cpu.safetensors")
    write_safetensors(path, [(n, "F32", m.shape, m.tobytes()) for n, m in mats.items()])
    seconds, got = run_tensormorph(args.binary, path, "only=cpu", args.rung, None, args.workdir)
    peer_total = 0.0
    for name, m in mats.items():
        start = time.perf_counter()
        want = np.linalg.svd(m.astype(np.float64), compute_uv=False)
        peer = time.perf_counter() - start
        peer_total += peer
        worst_bound, worst_rel = accuracy(got[name], want)
        print(f"{name} {m.shape[0]}x{m.shape[1]}: numpy.linalg.svd {peer:.2f} s; |ours - numpy| <= {worst_bound:.3g} x our bound "
              f"({worst_rel:.2e} of sigma_1)")
    print(f"tensormorph spectrum (rung {args.rung}, whole process, both matrices): {seconds:.2f} s; numpy {peer_total:.2f} s; "
          f"speedup {peer_total / seconds:.2f} (target >= 1.5)")


def llama_shapes(blocks):
    for b in range(blocks):
        for role, shape in (("q_proj", (4096, 4096)), ("k_proj", (4096, 4096)), ("v_proj", (4096, 4096)),
                            ("o_proj", (4096, 4096)), ("gate_proj", (11008, 4096)), ("up_proj", (11008, 4096)),
                            ("down_proj", (4096, 11008))):
            yield f"model.layers.{b}.{role}.weight", shape


def gpu(args):
    import torch

    rng = np.random.default_rng(11)
    tensors = []
    for name, shape in llama_shapes(args.blocks):
        # Random BF16 bits drawn directly (a Gaussian per element would take minutes for 6.5 billion):
        # random signs and mantissas over two binades around 0.01, a noise matrix's spectrum.
        bits = (rng.integers(0, 1 << 16, size=shape, dtype=np.uint16) & 0x80FF) | 0x3C00
        tensors.append((name, "BF16", shape, bits.tobytes()))
    path = os.path.join(args.workdir, "llama7b.safetensors")
    write_safetensors(path, tensors)
    print(f"{len(tensors)} matrices, {sum(len(t[3]) for t in tensors) / 1e9:.1f} GB BF16")
    seconds, got = run_tensormorph(args.binary, path, "prefer=cuda", args.rung, args.plugins, args.workdir)
    print(f"tensormorph spectrum (rung {args.rung}, whole process): {seconds:.1f} s for {len(tensors)} matrices "
          f"({seconds / len(tensors):.3f} s each) (target < 60 s for 224)")
    peer = [t for t in tensors if int(t[0].split(".")[2]) < args.peer_blocks]
    for precision, dtype in (("float32", torch.float32), ("float64", torch.float64)):
        device_mats = [torch.from_numpy(bf16_values(raw, shape).copy()).to("cuda", dtype) for _, _, shape, raw in peer]
        torch.linalg.svdvals(device_mats[0][:64, :64])  # the solver's start-up, outside the timing
        torch.cuda.synchronize()
        start = time.perf_counter()
        results = [torch.linalg.svdvals(m) for m in device_mats]
        torch.cuda.synchronize()
        peer_seconds = time.perf_counter() - start
        worst = max(accuracy(got[name], r.double().cpu().numpy())[0] for (name, _, _, _), r in zip(peer, results))
        per_matrix = peer_seconds / len(peer)
        print(f"torch.linalg.svdvals ({precision}, on the GPU, {len(peer)} matrices in memory): {peer_seconds:.1f} s "
              f"({per_matrix:.3f} s each); |ours - torch| <= {worst:.3g} x our bound; "
              f"speedup {per_matrix * len(tensors) / seconds:.2f} per matrix (target >= 4)")
        del device_mats, results
        torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("mode", choices=["cpu", "gpu"])
    parser.add_argument("--rung", choices=["exact", "gram"], default="exact")
    parser.add_argument("--blocks", type=int, default=32)
    parser.add_argument("--peer-blocks", type=int, default=32)
    parser.add_argument("--plugins", default=None)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--small", action="store_true", help="cpu: matrices an eighth the size (a smoke test)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        args.workdir = args.workdir or tmp
        cpu(args) if args.mode == "cpu" else gpu(args)


if __name__ == "__main__":
    main()
