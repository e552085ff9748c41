#!/usr/bin/env bash
# Sets everything up and runs the whole test suite: the README's second command (and CI's).
# Warnings are errors in both configurations; the tests run under AddressSanitizer + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

echo "== release build: the binary, the CUDA and HIP modules, the benchmarks, the conformance test, the browser tests' twin plugin (warnings are errors)"
scripts/build.sh release -j"$jobs" tm_release_artifacts backend_conformance_test tm_test_device_twin

echo "== Python API: pip install of the checkout, offline, into build/venv over Debian's packages; pytest"
scripts/install-python.sh  # the release build above built the native module: pip only copies it
(cd tests/python && ../../build/venv/bin/python -m pytest -q -p no:cacheprovider)

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build"
scripts/build.sh asan -j"$jobs"

echo "== OpenCL plugin (separate CMake project against the public C header; runs on PoCL)"
plugins/opencl/build.sh

export TM_REQUIRE_OPENCL=1
export TM_REQUIRE_WEBGPU=1  # the WebGPU backend on lavapipe (scripts/install-deps.sh installs both)

echo "== every WebGPU kernel against the CPU reference, on lavapipe; the GPU modules load and export the ABI (release build)"
# Under AddressSanitizer lavapipe runs the same kernels over ten times slower (its device memory
# comes from the sanitizer's allocator: page faults and TLB shootdowns), so its conformance cases
# run here; the sanitizer build still drives the WebGPU backend through every other test.
XDG_CACHE_HOME="$PWD/build/release/test-cache" build/release/tests/backend_conformance_test \
  --gtest_filter='BackendConformance/*/webgpu:GpuModules.*'
# The sanitizer build leaves the CUDA and HIP modules out: their checks run on the release build.
ctest --test-dir build/release --output-on-failure -R '_module_exports$'

echo "== tests (ASan + UBSan)"
# intercept_tls_get_addr=0: GCC 12's sanitizer takes some of glibc 2.36's dynamic TLS blocks (those
# 16 bytes past a page boundary) for an older glibc's header and reads a bogus range from it, which
# crashes LeakSanitizer's scan at exit in processes that loaded Dawn and Mesa.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:intercept_tls_get_addr=0
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan-suppressions.txt:print_suppressions=0"
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build/asan --output-on-failure -j"$jobs" -E '^BackendConformance/.*/webgpu$'

echo "== viewer: web UI (npm packages, esbuild) and browser tests (Debian Chromium via playwright-core)"
scripts/build-web.sh
for t in overview viewer compare split; do node "tests/browser/$t.test.mjs" build/release/tensormorph build/browser-artifacts; done

echo "== fuzzing: every parser under libFuzzer (clang, ASan + UBSan), kept inputs replayed, then 45 s each"
cmake -S fuzz -B build/fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DTM_WERROR=ON >/dev/null
ninja -C build/fuzz -j"$jobs"
ctest --test-dir build/fuzz --output-on-failure
scripts/fuzz.sh 45
