#!/usr/bin/env bash
# Installs the Debian 12 packages Tensormorph needs, only those missing (idempotent).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config python3 python3-numpy
  lld                                     # LLVM's linker (scripts/build.sh): links in a fraction of GNU ld's time
  clang                                   # the libFuzzer targets (fuzz/, scripts/fuzz.sh)
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libtbb-dev libhwy-dev libxxhash-dev libzstd-dev zlib1g-dev
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd
  hipcc libamdhip64-dev rocm-device-libs  # builds (not runs) the HIP module; under 0.8 GB with clang-15
  libcpp-httplib-dev libspng-dev          # tensormorph serve: HTTP server, PNG tiles
  liblapacke-dev libopenblas-dev          # spectra: LAPACK on OpenBLAS's threads
  pybind11-dev python3-dev python3-pip python3-venv python3-setuptools python3-wheel  # the Python package (pip install .)
  python3-pytest python3-pandas python3-tqdm                            # its tests; DataFrames and progress bars
  chromium wrk                            # the viewer's browser tests and its load benchmark
  fio time                                # bench/cold_index.sh: the device's best read, peak RSS
  libvulkan1 mesa-vulkan-drivers          # the WebGPU backend's Vulkan loader, and lavapipe (a software Vulkan device)
)
# The web UI builds with Node.js and npm; a machine that already has them (any source) keeps its own.
if ! command -v npm >/dev/null 2>&1; then PACKAGES+=(nodejs npm); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -ne 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "installing: ${missing[*]}" >&2
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
fi

# The WebGPU backend needs a Vulkan device with the features Dawn requires; Debian 12's lavapipe
# (Mesa 22.3) lacks two (sampled and storage image array dynamic indexing), bookworm-backports'
# (Mesa 25) has them.
mesa_version=$(dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null || true)
if ! dpkg --compare-versions "${mesa_version:-0}" ge 24; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' |
      $SUDO tee /etc/apt/sources.list.d/bookworm-backports.sources >/dev/null
  fi
  echo "installing: mesa-vulkan-drivers from bookworm-backports (lavapipe for the WebGPU backend)" >&2
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    -t bookworm-backports mesa-vulkan-drivers
fi

# Dawn (the WebGPU backend's library) comes from npm, which the packages above provide.
"$(dirname "$0")/install-dawn.sh"
