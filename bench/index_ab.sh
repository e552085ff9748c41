#!/usr/bin/env bash
# Interleaved A/B of `tensormorph index` builds on the same checkpoints, warm page cache.
#
#   bench/index_ab.sh ROUNDS DIR "FILE..." BINARY...
#
# Each round indexes every FILE (in DIR) once with every BINARY, alternating, so slow phases of the
# machine fall on all binaries alike. Before a file's turn, a file that `fincore` shows
# partly evicted is dropped and read back through a MADV_HUGEPAGE mapping (`read_bandwidth
# --map-only`, from TM_RBW, default build-perf/bench/read_bandwidth), as index_bench.sh warms.
# Prints per file and binary the tool's own times (s) and the sums of the tile_stats records (ms),
# one value per round.
set -euo pipefail
if (( $# < 4 )); then
  echo "usage: $0 ROUNDS DIR \"FILE...\" BINARY..." >&2
  exit 2
fi
here=$(cd "$(dirname "$0")/.." && pwd)
rounds=$1 dir=$2 files=$3
shift 3
binaries=()
for b in "$@"; do binaries+=("$(realpath "$b")"); done
rbw=$(realpath "${TM_RBW:-$here/build-perf/bench/read_bandwidth}")
cd "$dir"
for ((i = 0; i < rounds; i++)); do
  for f in $files; do
    if (( $(fincore -b -n -o RES "$f" | tr -d ' ') < $(stat -c %s "$f") )); then
      dd if="$f" iflag=nocache count=0 status=none
      "$rbw" --map-only "$f"
    fi
    for b in "${binaries[@]}"; do
      rm -f "$f.tmindex"
      printf '%s %s ' "$f" "$b"
      "$b" index --threads 2 --explain "$f" 2>&1 |
        awk '/tm.tile_stats/ {ms += $6} /^time / {printf "%s ", $2} END {printf "%.1f\n", ms}'
    done
  done
done | awk '{k = $1 " " $2; t[k] = t[k] " " $3; s[k] = s[k] " " $4}
            END {for (k in t) print k, "| index s:" t[k], "| tile_stats ms:" s[k]}' | sort
