#!/usr/bin/env bash
# The Python suite (tests/python) over the ASan+UBSan libember of build-asan, in the venv that
# scripts/test-python.sh made (build/py-venv: its `ember` package, pointed at the sanitized
# library with EMBER_LIBRARY): every out-of-bounds access, use after free or undefined behaviour
# in Ember that the Python API reaches fails the run. Leaks are not LeakSanitizer's here: CPython
# is not instrumented and keeps memory until exit, and its stale pointers hide freed objects from
# a conservative scan; the suite checks Ember's own memory instead (the CPU device's bytes in use
# return to where they were after models, tensors, DLPack exchanges and training are dropped).
set -euo pipefail
cd "$(dirname "$0")/.."
lib=$PWD/build-asan/libember.so
[ -f "$lib" ] || { echo "test-python-asan: $lib missing (build build-asan first)" >&2; exit 1; }
[ -x build/py-venv/bin/python ] || { echo "test-python-asan: run scripts/test-python.sh first" >&2; exit 1; }
preload="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
cd build
LD_PRELOAD="$preload" EMBER_LIBRARY="$lib" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1 ../build/py-venv/bin/python -m pytest -q -p no:cacheprovider \
  ../tests/python
