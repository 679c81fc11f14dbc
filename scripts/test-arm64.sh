#!/usr/bin/env bash
# The aarch64 build and its tests: cross-compiles Ember with Debian's gcc-aarch64-linux-gnu
# (warnings as errors; cmake/toolchain-aarch64.cmake) and runs a subset of the suite under
# qemu-aarch64 (docs/platforms.md):
#   - on `-cpu max` (NEON + the bf16 dot instructions: the neon kernels with BFDOT) and on
#     `-cpu cortex-a72` (NEON without bf16: the neon kernels that widen bf16 by a shift):
#     every op suite in all modes (their generic mode runs the portable C twins), test_core,
#     test_models, test_moe, test_compile, test_nn, test_index, test_gemm (EMBER_TEST_QUICK) and
#     `ember generate` against transformers' greedy tokens;
#   - test_gemm and test_moe once more at EMBER_CPU_LEVEL=generic.
# Every test checks that it ran on the kernels claimed (EMBER_TEST_EXPECT_KERNELS). Called by
# scripts/test.sh; exits non-zero on any failure. Usage: scripts/test-arm64.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps-arm64.sh
build=${1:-build-arm64}
jobs=$(nproc)
t0=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_WERROR=ON \
  -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake >/dev/null
suites="core models moe compile nn index gemm"
targets="ember test_ops"
for s in $suites; do targets="$targets test_$s"; done
# shellcheck disable=SC2086 # a list of targets
cmake --build "$build" -j "$jobs" --target $targets
t1=$(date +%s)
echo "arm64 cross build: $((t1 - t0)) s"
subset="^(ops_.*|generate_.*|test_($(echo "$suites" | tr ' ' '|')))\$"
export EMBER_TEST_QUICK=1
for cpu in max cortex-a72; do
  if [ "$cpu" = max ]; then kernels=neon+bf16; else kernels=neon; fi
  echo "== arm64 under qemu-aarch64 -cpu $cpu (kernels: $kernels)"
  s=$(date +%s)
  QEMU_CPU=$cpu EMBER_TEST_EXPECT_KERNELS=$kernels \
    ctest --test-dir "$build" -j "$jobs" -R "$subset" --output-on-failure
  echo "arm64 -cpu $cpu: $(($(date +%s) - s)) s"
done
echo "== arm64 test_gemm and test_moe on the portable kernels (EMBER_CPU_LEVEL=generic)"
s=$(date +%s)
QEMU_CPU=max EMBER_CPU_LEVEL=generic EMBER_TEST_EXPECT_KERNELS=generic \
  ctest --test-dir "$build" -j "$jobs" -R '^test_(gemm|moe)$' --output-on-failure
echo "arm64 generic: $(($(date +%s) - s)) s; arm64 in all: $(($(date +%s) - t0)) s"
