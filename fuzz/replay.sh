#!/usr/bin/env bash
# Runs a fuzz target once over every file in the given directories (no mutation, no new files);
# fails on the first crash, hang or sanitizer report.
set -euo pipefail
target=$1
shift
files=()
for dir in "$@"; do
  [ -d "$dir" ] || continue
  while IFS= read -r -d '' f; do files+=("$f"); done < <(find "$dir" -type f ! -name README.md -print0 | sort -z)
done
if [ ${#files[@]} -eq 0 ]; then
  echo "no inputs in $*"
  exit 0
fi
exec "$target" -timeout=30 -rss_limit_mb=2048 "${files[@]}"
