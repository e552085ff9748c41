#!/usr/bin/env bash
# Cold and larger than memory: `tensormorph index` of a BF16 checkpoint of about 1.2x this machine's
# memory, against the device's best sequential read of the same file, in one run:
#   (a) the checkpoint (7B-llama layer shapes, BF16, written with what it writes dropped from the
#       page cache as it goes), evicted with POSIX_FADV_DONTNEED (no root needed);
#   (b) sequential reads of the whole file, evicted before each: one `dd`, four and eight `dd` of
#       a share each in parallel, `fio` with eight O_DIRECT pread jobs and with io_uring O_DIRECT at
#       queue depth 16, reads of 8 MiB; the best is the yardstick;
#   (c) a small unrelated file read into the page cache, then `tensormorph index --threads THREADS`
#       of the evicted checkpoint under /usr/bin/time (wall time, peak RSS), then how much of the
#       small file and of the checkpoint the page cache still holds;
#   (d) ratios against the limits: index >= 90% of the best read, peak RSS <= 2 GiB plus the index
#       written, the small file still cached.
#
#   bench/cold_index.sh TENSORMORPH DIR [THREADS] [FACTOR]   (defaults: nproc, 1.2)
#
# DIR needs FACTOR x MemTotal of free space; the checkpoint is deleted at the end (the index and
# the small file too). Needs dd, fio, fincore (util-linux), /usr/bin/time (Debian's time), python3.
set -euo pipefail
tm=$(realpath "$1")
dir=$2
threads=${3:-$(nproc)}
factor=${4:-1.2}
mkdir -p "$dir"
ckpt=$dir/cold-bf16.safetensors
probe=$dir/cold-probe.bin
index=$dir/cold-bf16.tmindex
cleanup() { rm -f "$ckpt" "$probe" "$index"; }
trap cleanup EXIT
for tool in dd fio fincore /usr/bin/time python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 2; }
done

mem_bytes=$(awk '/^MemTotal:/ { print $2 * 1024 }' /proc/meminfo)
target=$(awk -v m="$mem_bytes" -v f="$factor" 'BEGIN { printf "%.0f", m * f }')

evict() { python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY); os.fdatasync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)' "$1"; }
resident() { fincore --bytes --noheadings --output RES "$1" | tr -d ' '; }
now() { date +%s.%N; }
gbps() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%.2f", n / s / 1e9 }'; }

# --- (a) the checkpoint: whole llama layers of BF16 until it holds `target` bytes --------------
python3 - "$ckpt" "$target" <<'EOF'
import json, os, random, struct, sys
path, target = sys.argv[1], int(sys.argv[2])
layer = [("attn_norm", [4096]), ("attn_q", [4096, 4096]), ("attn_k", [4096, 4096]), ("attn_v", [4096, 4096]),
         ("attn_o", [4096, 4096]), ("ffn_norm", [4096]), ("ffn_gate", [11008, 4096]), ("ffn_up", [11008, 4096]),
         ("ffn_down", [4096, 11008])]
layer_bytes = sum(2 * (s[0] * (s[1] if len(s) > 1 else 1)) for _, s in layer)
header, offset = {}, 0
for n in range(max(1, target // layer_bytes)):
    for name, shape in layer:
        size = 2 * shape[0] * (shape[1] if len(shape) > 1 else 1)
        header[f"layers.{n}.{name}"] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
# A block of finite BF16 values (random signs and mantissas, magnitudes 2^-7..2^-3) repeated.
rng = random.Random(7)
block = bytearray(rng.randbytes(16 << 20))
block[1::2] = bytes((b & 0x80) | 0x3C | (b & 0x01) for b in block[1::2])
block = bytes(block)
if os.path.exists(path) and os.path.getsize(path) == 8 + len(text) + offset:
    sys.exit(0)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, struct.pack("<Q", len(text)) + text)
left, since_sync = offset, 0
while left:
    n = os.write(fd, block[: min(left, len(block))])
    left -= n
    since_sync += n
    if since_sync >= 1 << 30:  # written back and dropped as it goes: the generator flushes nothing else
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        since_sync = 0
os.fdatasync(fd)
os.close(fd)
EOF
size=$(stat -c %s "$ckpt")
evict "$ckpt"
echo "machine      $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p')), MemTotal $(awk -v m="$mem_bytes" 'BEGIN { printf "%.1f", m / 2^30 }') GiB, $(uname -r)"
echo "storage      $(df --output=source,fstype "$dir" | tail -1 | tr -s ' ')"
echo "checkpoint   $ckpt: $(awk -v s="$size" -v m="$mem_bytes" 'BEGIN { printf "%.2f GB (%.2f GiB, %.2fx MemTotal)", s / 1e9, s / 2^30, s / m }'), BF16, threads $threads"

# --- (b) the device's sequential reads of the same file ------------------------------------------
best=0 best_name=""
measure() {  # NAME COMMAND...: evicts, times the command, prints GB/s of the whole file
  local name=$1; shift
  evict "$ckpt"
  local t0 t1
  t0=$(now)
  if ! "$@" >/dev/null 2>&1; then printf 'read         %-34s failed\n' "$name"; return; fi
  t1=$(now)
  local rate
  rate=$(gbps "$size" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")
  printf 'read         %-34s %6s GB/s\n' "$name" "$rate"
  if awk -v r="$rate" -v b="$best" 'BEGIN { exit !(r > b) }'; then best=$rate best_name=$name; fi
}
dd_parallel() {  # READERS: that many dd, each of its share of the file
  local n=$1 share=$(( (size + $1 - 1) / $1 )) pids=() i
  for ((i = 0; i < n; i++)); do
    dd if="$ckpt" of=/dev/null bs=8M iflag=skip_bytes,count_bytes,nocache skip=$((i * share)) count=$share status=none &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
}
fio_jobs() {  # JOBS ARGS...: that many fio jobs, each of its share of the file (whole MiB for
  # O_DIRECT: the few MiB left at the end are not read, under 0.1% of the file)
  local n=$1 share=$(( size / $1 / 1048576 * 1048576 ))
  shift
  fio --name=seq --filename="$ckpt" --readwrite=read --bs=8M --size="$share" --offset_increment="$share" --numjobs="$n" \
    --group_reporting --invalidate=1 "$@"
}
# Every reference read leaves the page cache as it found it (dd drops behind, fio reads O_DIRECT),
# as the index does: a 1.2x-memory pass would otherwise flush every other file from it.
measure "dd, 1 reader, bs=8M, nocache" dd_parallel 1
measure "dd, 4 readers, bs=8M, nocache" dd_parallel 4
measure "dd, 8 readers, bs=8M, nocache" dd_parallel 8
measure "fio psync O_DIRECT, 8 jobs, bs=8M" fio_jobs 8 --ioengine=psync --direct=1
measure "fio io_uring O_DIRECT, qd 16, bs=8M" fio --name=seq --filename="$ckpt" --readwrite=read --bs=8M --iodepth=16 \
  --ioengine=io_uring --direct=1 --invalidate=1
echo "best read    $best GB/s ($best_name)"

# --- (c) index the evicted checkpoint beside a small cached file ----------------------------------
head -c $((64 << 20)) /dev/urandom > "$probe"
cat "$probe" > /dev/null
probe_before=$(resident "$probe")
evict "$ckpt"
rm -f "$index"
log=$(mktemp)
t0=$(now)
/usr/bin/time -v "$tm" index --threads "$threads" --index-path "$index" "$ckpt" > "$log" 2>&1 || { cat "$log"; exit 1; }
t1=$(now)
wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
tool=$(awk '$1 == "time" { print $2 }' "$log")
rss_kib=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$log")
index_bytes=$(stat -c %s "$index")
probe_after=$(resident "$probe")
ckpt_after=$(resident "$ckpt")
rm -f "$log"
rate=$(gbps "$size" "$wall")
echo "index        wall $(printf '%.2f' "$wall") s, $rate GB/s (tool's own time ${tool:-?} s)"
echo "peak RSS     $(awk -v k="$rss_kib" 'BEGIN { printf "%.3f GiB", k / 2^20 }'), index written $(awk -v b="$index_bytes" 'BEGIN { printf "%.3f GiB", b / 2^30 }')"
echo "page cache   small file: $probe_before bytes before, $probe_after after; checkpoint after: $ckpt_after bytes"

# --- (d) against the limits ------------------------------------------------------------------------
awk -v r="$rate" -v b="$best" -v rss="$rss_kib" -v ix="$index_bytes" -v pb="$probe_before" -v pa="$probe_after" 'BEGIN {
  bound = 2 * 2^30 + ix
  printf "index / best read     %.2f (limit >= 0.90) %s\n", r / b, (r / b >= 0.90 ? "met" : "MISSED")
  printf "peak RSS / bound      %.2f (bound 2 GiB + index = %.3f GiB) %s\n", rss * 1024 / bound, bound / 2^30, (rss * 1024 <= bound ? "met" : "MISSED")
  printf "small file kept       %.4f of it (limit 1.0000) %s\n", (pb > 0 ? pa / pb : 0), (pa >= pb ? "met" : "MISSED")
}'
