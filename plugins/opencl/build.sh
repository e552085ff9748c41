#!/usr/bin/env bash
# Configures, builds and tests the OpenCL plugin: ./build.sh [build-dir] (default: plugins/opencl/build).
# Environment: JOBS (parallel build jobs, default 2), CMAKE_BUILD_TYPE (default RelWithDebInfo),
# extra configure arguments in TM_OPENCL_CMAKE_ARGS (e.g. -DTM_OPENCL_SANITIZE=ON).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build_dir="${1:-$here/build}"
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
# shellcheck disable=SC2086  # TM_OPENCL_CMAKE_ARGS is a list of words on purpose
cmake -S "$here" -B "$build_dir" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" ${TM_OPENCL_CMAKE_ARGS:-}
cmake --build "$build_dir" --parallel "${JOBS:-2}"
ctest --test-dir "$build_dir" --output-on-failure
