#!/usr/bin/env bash
# Sets everything up, writes the demo checkpoint, shows it and serves the viewer: the README's first command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh release tensormorph
scripts/build-web.sh
tm=build/release/tensormorph
demo_dir="${TENSORMORPH_DEMO_DIR:-build/demo}"
"$tm" demo "$demo_dir"
echo
"$tm" info "$demo_dir"
echo
"$tm" index "$demo_dir"
echo
"$tm" stats "$demo_dir" --sort absmax
echo
# Last: the viewer on the demo checkpoint (prints its URL; Ctrl-C stops it).
exec "$tm" serve "$demo_dir" --port "${TENSORMORPH_PORT:-8080}"
