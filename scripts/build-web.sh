#!/usr/bin/env bash
# Installs the web UI's npm packages (as locked in web/package-lock.json) and builds web/dist.
set -euo pipefail
cd "$(dirname "$0")/../web"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi
npm run build --silent
