#!/usr/bin/env bash
# Installs Dawn's WebGPU library for the WebGPU backend: the prebuilt libwebgpu_wrapper.so of the
# npm package locked in third_party/dawn/package-lock.json, into third_party/dawn/node_modules.
# The backend loads it at run time; without it the backend reports itself unavailable.
set -euo pipefail
cd "$(dirname "$0")/../third_party/dawn"
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "install-dawn: no prebuilt Dawn for $(uname -s)-$(uname -m); the WebGPU backend will be unavailable" >&2
  exit 0
fi
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --silent
fi
