#!/usr/bin/env bash
# Installs the Debian 12 packages Tensormorph needs, only those missing (idempotent).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config python3 python3-numpy
  clang                                   # the libFuzzer targets (fuzz/, scripts/fuzz.sh)
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libtbb-dev libhwy-dev libxxhash-dev libzstd-dev zlib1g-dev
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd
  hipcc libamdhip64-dev rocm-device-libs  # builds (not runs) the HIP module; under 0.8 GB with clang-15
  libcpp-httplib-dev libspng-dev          # tensormorph serve: HTTP server, PNG tiles
  chromium wrk                            # the viewer's browser tests and its load benchmark
  fio time                                # bench/cold_index.sh: the device's best read, peak RSS
)
# The web UI builds with Node.js and npm; a machine that already has them (any source) keeps its own.
if ! command -v npm >/dev/null 2>&1; then PACKAGES+=(nodejs npm); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "installing: ${missing[*]}" >&2
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
