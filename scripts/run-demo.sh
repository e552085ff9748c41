#!/usr/bin/env bash
# Sets everything up, writes the demo checkpoint, shows it and serves the viewer: the README's first command.
# Each set-up step prints one line; its full output goes to build/logs/<step>.log, whose tail is
# printed only when the step fails (scripts/test.sh, which CI runs, shows everything).
set -euo pipefail
cd "$(dirname "$0")/.."
logs=build/logs
mkdir -p "$logs"

# step LABEL LOG COMMAND...: runs COMMAND quietly, saying "LABEL... done" or showing why it failed.
# The log's name is on the line, so a step that takes minutes the first time can be followed.
step() {
  local label=$1 log="$logs/$2.log"
  shift 2
  printf '%s (%s)... ' "$label" "$log"
  if "$@" >"$log" 2>&1; then
    echo done
  else
    local status=$?
    echo "failed (exit $status); the last lines of $log:"
    tail -n 40 "$log" | sed 's/^/  /'
    exit "$status"
  fi
}

step "installing packages" install-deps scripts/install-deps.sh
step "building tensormorph" build scripts/build.sh release tensormorph
step "installing the Python package into build/venv" install-python scripts/install-python.sh
step "building the web UI" build-web scripts/build-web.sh
echo

tm=build/release/tensormorph
demo_dir="${TENSORMORPH_DEMO_DIR:-build/demo}"
twin="$demo_dir/demo-mixed-quant.gguf"
port="${TENSORMORPH_PORT:-8080}"
"$tm" demo "$demo_dir"
echo
"$tm" info "$demo_dir"
echo
"$tm" index "$demo_dir"
echo
stats_json="$logs/demo-stats.json"
"$tm" stats "$demo_dir" --sort absmax
"$tm" stats "$demo_dir" --sort absmax --json >"$stats_json" 2>/dev/null
# The tensor to look at first: the first that holds NaN/Inf, else the one of largest magnitude.
unusual=$(python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
print((s["nonfinite_tensors"] or [t["name"] for t in s["tensors"]])[0])' "$stats_json")

cat <<EOF

What to try first
  In the viewer (its address is printed below; open it in a browser):
    - the overview: every tensor of the demo at a glance, the ones holding NaN/Inf marked
    - the most unusual tensor: $unusual
    - Compare: the safetensors set against its GGUF twin ($(basename "$twin")), tensor by tensor
  On the command line:
    $tm diff $demo_dir $twin
    $tm outliers $demo_dir --tensor '$unusual' -k 5
    $tm quantize-error $twin --reference $demo_dir
    $tm info $twin
  In Python (docs/PYTHON.md):
    build/venv/bin/python -c "import tensormorph as tm; print(tm.open('$demo_dir').stats().to_pandas())"
  Ctrl-C stops the viewer.

EOF
# Last: the viewer on the demo and its GGUF twin, so Compare has a pair; it prints its URL.
exec "$tm" serve "$demo_dir" "$twin" --port "$port"
