#!/usr/bin/env bash
# Configures and builds one configuration: scripts/build.sh [release|asan] [--python PYTHON] [TARGET...]
# (default release). --python names the interpreter the Python module is built for (pip passes its own).
set -euo pipefail
cd "$(dirname "$0")/.."
config="${1:-release}"
shift $(( $# > 0 ? 1 : 0 ))
python_flags=()
if [ "${1:-}" = "--python" ]; then python_flags=(-DPython_EXECUTABLE="$2"); shift 2; fi
# LLVM's linker: GNU ld spent tens of seconds on each sanitized test executable.
link=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_MODULE_LINKER_FLAGS=-fuse-ld=lld)
case "$config" in
  release) dir=build/release; flags=(-DCMAKE_BUILD_TYPE=Release -DTM_WERROR=ON "${link[@]}") ;;
  # Line tables (-g1) are what sanitizer reports need (file:line in every frame); full debug
  # information made the objects three times larger and the build a fifth slower. -O1, as the
  # sanitizers' authors advise: reports stay exact and the build is faster than at -O2.
  asan)    dir=build/asan;    flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DTM_WERROR=ON -DTM_SANITIZE=ON -DTM_BUILD_BENCH=OFF "${link[@]}"
                                     "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG") ;;
  *) echo "usage: scripts/build.sh [release|asan]" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" -G Ninja "${flags[@]}" "${python_flags[@]}" >/dev/null
ninja -C "$dir" "$@"
