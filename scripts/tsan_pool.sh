#!/usr/bin/env bash
# The thread pool and its stress test built with ThreadSanitizer and run: the pool's protocol
# (atomics, futex waits) against data races. Links the rest of the library from a normal build.
# usage: scripts/tsan_pool.sh [build dir with libember.a, default build]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
# the libraries libember.a needs: the required ones, and the optional ones the build may have
# found (MPI for the collectives, libmicrohttpd for ember serve); extra ones are harmless
libs="jansson libpcre2-8 libutf8proc libcurl"
for p in ompi-c libmicrohttpd libpng; do pkg-config --exists "$p" && libs="$libs $p"; done
cc -std=c11 -D_GNU_SOURCE -fsanitize=thread -O1 -g -Wall -Wextra -Wno-unused-parameter -Werror \
  -Isrc -Iinclude -Itests src/core/threadpool.c src/core/cpu_count.c tests/test_threadpool.c \
  tests/harness.c "$build/libember.a" $(pkg-config --libs $libs) \
  -lm -ldl -lpthread -o "$build/test_threadpool_tsan"
TSAN_OPTIONS=halt_on_error=1 "$build/test_threadpool_tsan"
