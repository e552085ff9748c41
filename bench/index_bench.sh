#!/usr/bin/env bash
# The indexing benchmark of issue 4, in one run:
#   (a) memory read bandwidth (bench/read_bandwidth, 2 threads, measured beside each checkpoint),
#   (b) `tensormorph index` throughput per storage type, warm page cache, best of $REPEAT,
#   (c) the numpy peer (bench/numpy_stats_peer.py, single-threaded): best chunked single pass and
#       one call per statistic,
#   (d) ratios against the targets, and cold-cache throughput against `dd` of the same file.
#
#   bench/index_bench.sh [DIR]          (checkpoints in DIR, default /tmp/tm-bench, ~4 GB)
#
# Environment: TM_BIN (a tensormorph binary) and TM_RBW (a read_bandwidth binary), else both are
# built in $TM_BENCH_BUILD (default build-bench); REPEAT (3), THREADS (2), NUMPY_LIMIT (bytes of
# each quantized checkpoint that numpy reads, default all; numpy decodes Q8_0/Q4_K at well under
# 0.1 GB/s), SKIP_COLD=1 to skip the cold-cache part, TABLE_OUT (also write the table there).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=${1:-/tmp/tm-bench}
REPEAT=${REPEAT:-3}
THREADS=${THREADS:-2}
NUMPY_LIMIT=${NUMPY_LIMIT:-0}
BUILD=${TM_BENCH_BUILD:-$ROOT/build-bench}

# name | storage type | target fraction of the read bandwidth
CHECKPOINTS=(
  "f32.safetensors F32 0.85"
  "bf16.safetensors BF16 0.85"
  "f16.safetensors F16 0.85"
  "q8_0.gguf Q8_0 0.70"
  "q4_k.gguf Q4_K 0.50"
)

log() { printf '%s\n' "$*" >&2; }

# --- tools ---------------------------------------------------------------------------------
if [[ -z "${TM_BIN:-}" || -z "${TM_RBW:-}" ]]; then
  log "building tensormorph and read_bandwidth in $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DTM_BUILD_TESTS=OFF -DTM_BUILD_BENCH=ON >/dev/null
  ninja -C "$BUILD" -j1 tensormorph read_bandwidth >&2
fi
TM=${TM_BIN:-$BUILD/tensormorph}
RBW=${TM_RBW:-$BUILD/bench/read_bandwidth}
PY=python3
if ! $PY -c 'import numpy' 2>/dev/null; then PY=/usr/bin/python3; fi  # Debian's python3-numpy
for tool in fincore dd "$PY"; do command -v "$tool" >/dev/null || { log "missing $tool"; exit 2; }; done

# --- checkpoints ---------------------------------------------------------------------------
$PY "$ROOT/bench/make_bench_checkpoints.py" "$DIR" >&2

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", b - a }'; }
gbps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.2f", (s > 0 ? n / s / 1e9 : 0) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
size_of() { stat -c %s "$1"; }
resident_bytes() { fincore --bytes --noheadings --output RES "$1" | tr -d ' '; }

# Reads the file into the page cache unless fincore says it is all there: through a mapping with
# MADV_HUGEPAGE, as `tensormorph index` reads a checkpoint the first time, so that the page cache
# holds it in 2 MiB folios where the file system allows (`cat` leaves small folios, which every
# later mapping faults in 64 KiB at a time: measured 20-30% slower indexing of the same file).
make_resident() {
  local f=$1 size
  size=$(size_of "$f")
  if (( $(resident_bytes "$f") < size )); then "$RBW" --map-only "$f"; fi
  if (( $(resident_bytes "$f") < size )); then
    log "warning: $f is only $(resident_bytes "$f") of $size bytes resident"
    return 1
  fi
}

# Drops the file from the page cache: POSIX_FADV_DONTNEED on the whole file (dd iflag=nocache
# count=0), then the global drop_caches if some pages stayed.
DROP_CACHES=no
if [[ -w /proc/sys/vm/drop_caches ]] && sync && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then DROP_CACHES=yes; fi
evict() {
  local f=$1
  dd if="$f" iflag=nocache count=0 status=none
  if (( $(resident_bytes "$f") > 0 )) && [[ $DROP_CACHES == yes ]]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi
  (( $(resident_bytes "$f") == 0 ))
}

# Runs `tensormorph index` on a fresh sidecar; prints "tool_seconds wall_seconds".
index_once() {
  local f=$1 out t0 t1
  rm -f "$f.tmindex"
  t0=$(now)
  out=$("$TM" index --threads "$THREADS" "$f")
  t1=$(now)
  local tool
  tool=$(awk '$1 == "time" { print $2 }' <<<"$out")
  [[ -n $tool ]] || { log "unexpected output of tensormorph index:"; log "$out"; exit 1; }
  echo "$tool $(elapsed "$t0" "$t1")"
}

# numpy, single-threaded, with OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset for this command only.
numpy_peer() {
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
    $PY "$ROOT/bench/numpy_stats_peer.py" "$@"
}

# --- machine -------------------------------------------------------------------------------
log "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/^Mem:/ { print $2 }') GiB"
log "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
log "numpy $($PY -c 'import numpy; print(numpy.__version__)'), BLAS $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo '?')"
log "drop_caches writable: $DROP_CACHES"

declare -A COLD_DD COLD_INDEX
if [[ ${SKIP_COLD:-0} != 1 ]]; then
  for entry in "${CHECKPOINTS[@]}"; do
    read -r name dtype target <<<"$entry"
    f=$DIR/$name
    size=$(size_of "$f")
    if ! evict "$f"; then log "cannot evict $f: skipping its cold run"; continue; fi
    t0=$(now); dd if="$f" of=/dev/null bs=1M status=none; t1=$(now)
    COLD_DD[$name]=$(gbps "$size" "$(elapsed "$t0" "$t1")")
    evict "$f"
    read -r tool wall < <(index_once "$f")
    COLD_INDEX[$name]=$(gbps "$size" "$wall")
    log "cold  $name: dd ${COLD_DD[$name]} GB/s, index ${COLD_INDEX[$name]} GB/s (wall)"
  done
fi

# --- warm ----------------------------------------------------------------------------------
ROWS=()
for entry in "${CHECKPOINTS[@]}"; do
  read -r name dtype target <<<"$entry"
  f=$DIR/$name
  size=$(size_of "$f")
  # Start from the page cache a first index run leaves (see make_resident), whatever wrote the file.
  evict "$f" || log "cannot evict $f: its warm runs use the page cache as it is"
  make_resident "$f"
  bw=$("$RBW" --threads "$THREADS" --mib 1024 --repeat 3 "$f")
  anon=$(awk '$1 == "anon_4k" || $1 == "anon_thp" { if ($2 > m) m = $2 } END { print m }' <<<"$bw")
  mmap_sum=$(awk '$1 == "mmap_file" { print $2 }' <<<"$bw")
  best_tool=1e9 best_wall=1e9
  for _ in $(seq "$REPEAT"); do
    make_resident "$f"
    read -r tool wall < <(index_once "$f")
    best_tool=$(awk -v a="$best_tool" -v b="$tool" 'BEGIN { print (b < a ? b : a) }')
    best_wall=$(awk -v a="$best_wall" -v b="$wall" 'BEGIN { print (b < a ? b : a) }')
  done
  tm_tool=$(gbps "$size" "$best_tool")
  tm_wall=$(gbps "$size" "$best_wall")
  limit=()
  if [[ $dtype == Q* && $NUMPY_LIMIT != 0 ]]; then limit=(--limit-bytes "$NUMPY_LIMIT"); fi
  np_chunked=0 np_chunk=0
  for chunk in 16384 65536 262144; do
    make_resident "$f"
    read -r _ _ _ _ rate < <(numpy_peer --variant chunked --chunk "$chunk" --repeat 2 "${limit[@]}" "$f")
    if awk -v a="$rate" -v b="$np_chunked" 'BEGIN { exit !(a > b) }'; then np_chunked=$rate np_chunk=$chunk; fi
  done
  make_resident "$f"
  read -r _ _ _ _ np_per_stat < <(numpy_peer --variant per-stat --repeat 1 "${limit[@]}" "$f")
  ROWS+=("$name $dtype $size $anon $mmap_sum $tm_tool $tm_wall $target $np_chunked $np_chunk $np_per_stat")
  log "warm  $name: bandwidth $anon GB/s (mmap sum $mmap_sum), index $tm_tool GB/s (wall $tm_wall), numpy $np_chunked / $np_per_stat GB/s"
done

# --- table ---------------------------------------------------------------------------------
{
  echo "| checkpoint | GB | read bandwidth GB/s | mmap+sum of the file GB/s | index GB/s (wall GB/s) | index / bandwidth | target | numpy chunked GB/s (chunk) | numpy per-statistic GB/s | index / numpy chunked | cold: dd GB/s | cold: index GB/s |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for row in "${ROWS[@]}"; do
    read -r name dtype size anon mmap_sum tm_tool tm_wall target np_chunked np_chunk np_per_stat <<<"$row"
    r_bw=$(ratio "$tm_tool" "$anon")
    verdict=$(awk -v r="$r_bw" -v t="$target" 'BEGIN { print (r >= t ? "met" : "MISSED") }')
    r_np=$(ratio "$tm_tool" "$np_chunked")
    verdict_np=$(awk -v r="$r_np" 'BEGIN { print (r >= 10 ? "met" : "MISSED") }')
    printf '| %s (%s) | %.2f | %s | %s | %s (%s) | %d%% %s | %d%% | %s (%s) | %s | %sx %s | %s | %s |\n' \
      "$name" "$dtype" "$(awk -v s="$size" 'BEGIN { print s / 1e9 }')" "$anon" "$mmap_sum" "$tm_tool" "$tm_wall" \
      "$(awk -v r="$r_bw" 'BEGIN { printf "%d", r * 100 + 0.5 }')" "$verdict" \
      "$(awk -v t="$target" 'BEGIN { printf "%d", t * 100 + 0.5 }')" "$np_chunked" "$np_chunk" "$np_per_stat" \
      "$r_np" "$verdict_np" "${COLD_DD[$name]:--}" "${COLD_INDEX[$name]:--}"
  done
  echo
  echo "$(date -u +%Y-%m-%d) · $(nproc) cores · $(lscpu | sed -n 's/^Model name: *//p') · threads $THREADS · best of $REPEAT · load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "${TABLE_OUT:-/dev/null}"
