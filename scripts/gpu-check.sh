#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU (driver installed), runs Ember on cuda:0 through
# XLA's CUDA PJRT plugin and writes what it measured to a folder (default ./gpu-results, or $1):
#   summary.txt       every step's exit status and last lines, the elapsed time
#   devices.txt       nvidia-smi and `ember devices`
#   conformance.txt   `ember test-devices --device cuda:0`: every op case of the core suite
#                     against torch's committed reference and the CPU backend (one process per
#                     op family, in parallel: XLA compiles each op once, on the host)
#   image.txt         tests/check_image_device.py cuda:0: five diffusers pipelines, eager and
#                     compiled, against diffusers' images
#   train.txt         tests/check_train.py --device cuda:0 qwen3: torch's 10 AdamW steps, resume,
#                     recomputation, the compiled step
#   bench.txt         `ember bench ops|moe|decode --device cuda:0` (quick forms, no peers)
# The plugin: the one installed in python3's environment (jax-cuda13-pjrt) when there is one,
# else pip installs jax-cuda13-pjrt and the NVIDIA libraries into build-gpu/venv. Ember: the
# bundle of scripts/gpu-bundle.sh (build-gpu/bundle) when present, else built here (needs the
# Debian -dev packages of scripts/deps.sh). Steps stop early when EMBER_GPU_BUDGET_S (default
# 480) seconds are spent, so that the folder comes back within a lease; EMBER_GPU_STEPS="bench_moe
# bench_decode" runs only the steps named. The benchmarks keep XLA's autotuning (about 11 s per
# program on an H200) unless EMBER_GPU_BENCH_XLA_FLAGS says otherwise.
#   usage: scripts/gpu-check.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-gpu-results}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUDGET=${EMBER_GPU_BUDGET_S:-480}
start=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - start) )); }
step() { # name, log file, time limit in s, command...
  local name=$1 log=$2 limit=$3
  shift 3
  if [ -n "${EMBER_GPU_STEPS:-}" ] && ! [[ " $EMBER_GPU_STEPS " == *" $name "* ]] &&
    [ "$name" != pip_install ] && [ "$name" != build ]; then
    return 0
  fi
  local l; l=$(left)
  if [ "$l" -lt 20 ]; then
    echo "== $name: skipped, ${l}s of the budget left" | tee -a "$OUT/summary.txt"
    return 0
  fi
  [ "$limit" -gt "$l" ] && limit=$l
  local t0; t0=$(date +%s)
  echo "== $name (limit ${limit}s)" | tee -a "$OUT/summary.txt"
  echo "==== $name: $*" >>"$OUT/$log"
  timeout -k 5 "$limit" "$@" >>"$OUT/$log" 2>&1
  local rc=$?
  echo "   exit $rc after $(( $(date +%s) - t0 ))s" | tee -a "$OUT/summary.txt"
  tail -n 6 "$OUT/$log" | cut -c1-240 | sed 's/^/   | /' | tee -a "$OUT/summary.txt"
  return 0
}
nvidia-smi >"$OUT/devices.txt" 2>&1 || echo "nvidia-smi failed: is there a GPU?" | tee -a "$OUT/summary.txt"

# 1. the plugin and the NVIDIA libraries it dlopens (libcublas, libcudnn, ... from the nvidia-*
#    wheels beside it)
DEV=${EMBER_GPU_DEVICE:-cuda:0} # xla:0 for a dry run on XLA's CPU plugin
PY=${PYTHON:-python3}
find_plugin() {
  "$1" - <<'EOF' 2>/dev/null
import importlib.util, os
for name in ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12"):
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        spec = None
    for d in (spec.submodule_search_locations or []) if spec else []:
        p = os.path.join(d, "xla_cuda_plugin.so")
        if os.path.exists(p):
            print(p)
            raise SystemExit
EOF
}
PLUGIN=$(find_plugin "$PY")
if [ -z "$PLUGIN" ] && [ "${DEV%%:*}" = cuda ]; then
  VENV=build-gpu/venv
  mkdir -p build-gpu
  [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV"
  V=${EMBER_CUDA_PLUGIN_VERSION:-0.12.0.1}
  step pip_install summary.txt 150 "$VENV/bin/pip" install --disable-pip-version-check \
    "jax-cuda13-pjrt==$V" "jax-cuda13-plugin[with-cuda]==$V"
  PLUGIN=$(find_plugin "$VENV/bin/python")
fi
if [ -n "$PLUGIN" ]; then
  PLUGIN=$(cd "$(dirname "$PLUGIN")" && pwd)/$(basename "$PLUGIN")
  export EMBER_PJRT_CUDA_PLUGIN="$PLUGIN"
  SITE=$(dirname "$(dirname "$(dirname "$PLUGIN")")")
  libs=$(ls -d "$SITE"/nvidia/*/lib "$SITE"/nvidia/cu13/lib 2>/dev/null | tr '\n' ':')
  export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:-}"
fi
export EMBER_PJRT_CACHE_DIR="$PWD/build-gpu/pjrt-cache"
# XLA would take 75 % of the GPU's memory up front; the checks need little, and the conformance
# processes run side by side
export EMBER_PJRT_OPTIONS=${EMBER_PJRT_OPTIONS:-preallocate=false}
export EMBER_FIXTURES="$PWD/tests/fixtures"
echo "plugin: ${EMBER_PJRT_CUDA_PLUGIN:-none found}" | tee -a "$OUT/summary.txt"

# 2. Ember: the carried bundle (only the libraries this machine lacks on the path), or a build
if [ -x build-gpu/bundle/ember ]; then
  EMBER=$PWD/build-gpu/bundle/ember
  mkdir -p /tmp/ember-lib
  for f in build-gpu/bundle/lib/*; do
    ldconfig -p | grep -q "/$(basename "$f")\$" || ln -sf "$PWD/$f" /tmp/ember-lib/
  done
  export LD_LIBRARY_PATH="/tmp/ember-lib:${LD_LIBRARY_PATH:-}"
  if ! "$EMBER" --help >/dev/null 2>&1; then # a system library too old: take all of ours
    ln -sf "$PWD"/build-gpu/bundle/lib/* /tmp/ember-lib/
  fi
  echo "ember: the bundle; from it: $(ls /tmp/ember-lib | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
else
  step build summary.txt 120 bash -c "cmake -S . -B build-gpu/build -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DEMBER_BUILD_TESTS=OFF -DEMBER_MPI=OFF >/dev/null && \
    cmake --build build-gpu/build -j $(nproc) --target ember"
  EMBER=$PWD/build-gpu/build/tools/ember/ember
fi

# 3. the checks, most telling first. The correctness checks compile hundreds of small programs:
#    XLA's GPU autotuning (timing candidate kernels for each product) would dominate them; the
#    benchmarks keep it.
[ "${DEV%%:*}" = cuda ] && export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_autotune_level=0"
step devices devices.txt 40 "$EMBER" devices
fam_dir=/tmp/ember-families
rm -rf "$fam_dir"
for j in tests/fixtures/ops/*.json; do
  f=$(basename "$j" .json)
  mkdir -p "$fam_dir/$f"
  ln -s "$PWD/tests/fixtures/ops/$f.json" "$PWD/tests/fixtures/ops/$f.bin" "$fam_dir/$f/"
done
families=$(ls "$fam_dir")
conformance() { # every family in its own process, 6 at a time; one log, family by family
  echo "$families" | xargs -P 6 -I{} sh -c "\"$EMBER\" test-devices --device $DEV --fixtures \
    \"$fam_dir/{}\" $* >\"$fam_dir/{}.log\" 2>&1; echo \"{}: exit \$?\" >>\"$fam_dir/{}.log\""
  for f in $families; do echo "-- $f"; cat "$fam_dir/$f.log"; done
}
export -f conformance
export EMBER fam_dir families DEV
step conformance conformance.txt 170 bash -c conformance
step image image.txt 120 python3 tests/check_image_device.py $DEV "$EMBER"
step train train.txt 120 python3 tests/check_train.py --device $DEV qwen3 "$EMBER"
step bench_ops bench.txt 45 env XLA_FLAGS="${EMBER_GPU_BENCH_XLA_FLAGS:-}" "$EMBER" bench ops --device $DEV --quick
step bench_moe bench.txt ${EMBER_GPU_MOE_S:-60} env XLA_FLAGS="${EMBER_GPU_BENCH_XLA_FLAGS:-}" "$EMBER" bench moe --device $DEV --quick --skip-peers \
  --batches 1,16,64
step bench_decode bench.txt ${EMBER_GPU_DECODE_S:-90} env XLA_FLAGS="${EMBER_GPU_BENCH_XLA_FLAGS:-}" "$EMBER" bench decode --preset qwen3-0.6b --device $DEV --compile \
  --skip-peers --batches 1,16 --cache-dir /tmp/ember-bench-models
step conformance_compiled conformance.txt 120 bash -c "conformance --compile"
echo "total $(( $(date +%s) - start ))s; results in $OUT" | tee -a "$OUT/summary.txt"
