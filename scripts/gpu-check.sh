#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU (driver installed), installs XLA's CUDA PJRT
# plugin and the CUDA libraries it loads with pip (into a venv), builds Ember, then runs
#   ember devices, ember test-devices --device cuda:0, ember bench moe --device cuda:0
# writing every output to a folder (default ./gpu-results, or $1). It finishes in under 8 minutes:
# the steps' time limits add up to 470 s (pip 150, build 80, devices 20, conformance 100 + 20,
# bench ops 40, bench moe 60); a step that fails or times out is recorded and the next one runs.
# It has not been run yet: the session that wrote it had no GPU.
#   usage: scripts/gpu-check.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-results}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PLUGIN_VERSION=${EMBER_CUDA_PLUGIN_VERSION:-0.12.0.1}
start=$(date +%s)
step() { # name, time limit in s, command...
  local name=$1 limit=$2
  shift 2
  local t0=$(date +%s)
  echo "== $name (limit ${limit}s)" | tee -a "$OUT/summary.txt"
  timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  echo "   exit $rc after $(( $(date +%s) - t0 ))s" | tee -a "$OUT/summary.txt"
  tail -n 5 "$OUT/$name.txt" | sed 's/^/   | /' | tee -a "$OUT/summary.txt"
  return 0
}
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed: is there a GPU?" | tee -a "$OUT/summary.txt"

# 1. the plugin (jax-cuda13-pjrt carries xla_cuda_plugin.so) and the NVIDIA libraries it loads
#    (the with-cuda extra of jax-cuda13-plugin pulls the nvidia-* wheels), in a venv
VENV=build-gpu/venv
mkdir -p build-gpu
[ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"
step pip_install 150 "$VENV/bin/pip" install --disable-pip-version-check \
  "jax-cuda13-pjrt==$PLUGIN_VERSION" "jax-cuda13-plugin[with-cuda]==$PLUGIN_VERSION"
SITE=$(ls -d "$VENV"/lib/python3*/site-packages | head -n 1)
PLUGIN=$(ls "$SITE"/jax_plugins/xla_cuda13/xla_cuda_plugin.so 2>/dev/null | head -n 1)
export EMBER_PJRT_CUDA_PLUGIN="$PWD/$PLUGIN"
# the plugin dlopens libcublas, libcudnn, ... from the nvidia wheels
libs=$(ls -d "$PWD/$SITE"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:-}"
export EMBER_PJRT_CACHE_DIR="$PWD/build-gpu/pjrt-cache"
# do not let XLA take 75 % of the GPU's memory up front (bench and tests need little)
export XLA_PYTHON_CLIENT_PREALLOCATE=false
export EMBER_PJRT_OPTIONS=${EMBER_PJRT_OPTIONS:-preallocate=false}
echo "plugin: $EMBER_PJRT_CUDA_PLUGIN" | tee -a "$OUT/summary.txt"

# 2. Ember (Release)
step build 80 bash -c "cmake -S . -B build-gpu/build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DEMBER_BUILD_TESTS=OFF >/dev/null && cmake --build build-gpu/build -j $(nproc)"
EMBER=build-gpu/build/tools/ember/ember

# 3. the checks
step devices 20 "$EMBER" devices
step test_devices 100 "$EMBER" test-devices --device cuda:0
timeout 20 "$EMBER" test-devices --device cuda:0 --json 2>/dev/null | tail -n 1 >"$OUT/test_devices.json"
step bench_ops 40 "$EMBER" bench ops --device cuda:0 --quick
step bench_moe 60 "$EMBER" bench moe --device cuda:0 --quick --skip-peers --batches 1,16,64
echo "total $(( $(date +%s) - start ))s; results in $OUT" | tee -a "$OUT/summary.txt"
