#!/usr/bin/env python3
"""Tile latency of `tensormorph serve`: cold (never rendered) and warm (cached) p50/p99, and tiles/s
with 8 concurrent clients. Usage: serve_bench.py URL CKPT TENSOR_INDEX [--tiles N] [--seed S]
The tiles are drawn uniformly over the levels from the overview to the deepest level."""
import argparse, concurrent.futures, http.client, json, random, time, urllib.parse

def get(conn, path):
    t0 = time.perf_counter()
    try:
        conn.request("GET", path)
        r = conn.getresponse()
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        # The server ends a kept-alive connection after 100 requests; a browser opens another.
        conn.close()
        t0 = time.perf_counter()
        conn.request("GET", path)
        r = conn.getresponse()
    body = r.read()
    return time.perf_counter() - t0, r.status, len(body)

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] * 1e3

def main():
    a = argparse.ArgumentParser()
    a.add_argument("url"); a.add_argument("ckpt", type=int); a.add_argument("tensor", type=int)
    a.add_argument("--name", required=True); a.add_argument("--tiles", type=int, default=400); a.add_argument("--seed", type=int, default=1)
    args = a.parse_args()
    u = urllib.parse.urlparse(args.url)
    conn = http.client.HTTPConnection(u.hostname, u.port)
    conn.request("GET", "/api/tensor?" + urllib.parse.urlencode({"ckpt": args.ckpt, "tensor": args.name}))
    info = json.loads(conn.getresponse().read())
    z, lo, hi = info["zoom"], *info["summary"]["range"]["diverging"]
    rng = random.Random(args.seed)
    levels = list(range(z["min_level"], z["max_level"] + 1))
    def tiles_at(level):
        shrink = z["max_level"] - level
        span = 256 // (32 >> shrink) if shrink <= 5 else 256 << (shrink - 5)
        return -(-info["cols"] // span), -(-info["rows"] // span)
    paths = set()
    while len(paths) < args.tiles:
        level = rng.choice(levels); tx, ty = tiles_at(level)
        if len(paths) >= sum(a * b for a, b in map(tiles_at, levels)): break
        paths.add(f"/api/tile/{args.ckpt}/{args.tensor}/{level}/{rng.randrange(tx)}/{rng.randrange(ty)}.png?lo={lo}&hi={hi}")
    paths = sorted(paths)
    rng.shuffle(paths)
    half = len(paths) // 2
    cold_paths, cold8_paths = paths[:half], paths[half:]
    cold = [get(conn, p) for p in cold_paths]
    warm = [get(conn, p) for p in cold_paths for _ in range(3)]
    def client(chunk):
        c = http.client.HTTPConnection(u.hostname, u.port)
        return [get(c, p) for p in chunk]
    def parallel(ps):
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            out = [x for r in pool.map(client, [ps[i::8] for i in range(8)]) for x in r]
        return out, len(ps) / (time.perf_counter() - t0)
    cold8, cold_rate = parallel(cold8_paths)
    warm8, warm_rate = parallel(cold_paths * 10)
    errors = sum(1 for r in cold + warm + cold8 + warm8 if r[1] != 200)
    cold_p99, warm_p99 = pct([r[0] for r in cold], 99), pct([r[0] for r in warm], 99)
    print(json.dumps({"tensor": args.name, "tiles": len(paths), "levels": [levels[0], levels[-1]],
        "cold_p50_ms": pct([r[0] for r in cold], 50), "cold_p99_ms": cold_p99, "cold_max_ms": max(r[0] for r in cold) * 1e3,
        "warm_p50_ms": pct([r[0] for r in warm], 50), "warm_p99_ms": warm_p99,
        # Issue 6's limits: cold p99 < 25 ms, warm p99 < 2 ms (a ratio under 1 meets the limit).
        "cold_p99_of_25ms_limit": cold_p99 / COLD_P99_LIMIT_MS, "warm_p99_of_2ms_limit": warm_p99 / WARM_P99_LIMIT_MS,
        "cold_tiles_per_s_8_clients": cold_rate, "warm_tiles_per_s_8_clients": warm_rate, "errors": errors,
        # The five slowest cold tiles (ms, level): what the cold p99 is made of.
        "slowest_cold": [[round(t * 1e3, 1), int(p.split("/")[5])] for t, p in sorted(zip([r[0] for r in cold], cold_paths))[-5:]]}))

COLD_P99_LIMIT_MS, WARM_P99_LIMIT_MS = 25.0, 2.0
main()
