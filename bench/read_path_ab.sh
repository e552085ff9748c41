#!/usr/bin/env bash
# How `tensormorph index` reads checkpoint bytes on the CPU: through the mapping, by pread into
# per-thread buffers, or by whichever measures faster (the default; src/backends/cpu/cpu_file_reads.h).
# For each benchmark checkpoint, and for a copy of f32.safetensors written just before (its page
# cache in small pages, as after a download), runs the three modes interleaved ROUNDS times and
# prints the median tool time of each and the ratio of the default to the faster fixed mode.
#
# Usage: bench/read_path_ab.sh TENSORMORPH ROUNDS DIR [THREADS]   (DIR from make_bench_checkpoints.py)
set -euo pipefail
bin=$1
rounds=$2
dir=$3
threads=${4:-$(nproc)}
export TENSORMORPH_CONFIG=${TENSORMORPH_CONFIG:-/tmp/tm_read_path_settings.json}  # defaults, not the user's
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp "$dir/f32.safetensors" "$scratch/f32-fresh-copy.safetensors"

index_time() {  # MODE FILE -> seconds of the tool's own time
  rm -f "$scratch/x.tmindex"
  TENSORMORPH_CPU_OPTIONS="file_reads=$1" "$bin" index --threads "$threads" --index-path "$scratch/x.tmindex" "$2" 2>&1 |
    awk '$1 == "time" { print $2 }'
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "threads $threads · rounds $rounds · $(uname -n) · $(lscpu | sed -n 's/^Model name: *//p')"
echo "| checkpoint | GB | mapping s | pread s | measure (default) s | default / faster fixed mode | default GB/s |"
echo "|---|---|---|---|---|---|---|"
for file in "$dir/f32.safetensors" "$dir/bf16.safetensors" "$dir/f16.safetensors" "$dir/q8_0.gguf" "$dir/q4_k.gguf" \
            "$scratch/f32-fresh-copy.safetensors"; do
  [ -f "$file" ] || continue
  cat "$file" > /dev/null  # resident as it is (index_bench.sh rebuilds it in 2 MiB folios first)
  declare -A times=([mapping]="" [pread]="" [measure]="")
  for ((r = 0; r < rounds; ++r)); do
    for mode in mapping pread measure; do times[$mode]+=" $(index_time "$mode" "$file")"; done
  done
  m=$(median <<<"${times[mapping]}")
  p=$(median <<<"${times[pread]}")
  d=$(median <<<"${times[measure]}")
  size=$(stat -c %s "$file")
  awk -v n="$(basename "$file")" -v s="$size" -v m="$m" -v p="$p" -v d="$d" 'BEGIN {
    best = m < p ? m : p
    printf "| %s | %.2f | %.3f | %.3f | %.3f | %.2f | %.2f |\n", n, s / 1e9, m, p, d, d / best, s / 1e9 / d }'
done
