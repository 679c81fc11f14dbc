#!/usr/bin/env bash
# Builds Ember for a GPU machine that has no Debian -dev packages (a CUDA image with the plugin
# already installed, no network): a Release `ember` without MPI and without tests, with the
# shared libraries it loads (libember and the jansson/pcre2/utf8proc/curl/png/microhttpd chains,
# glibc excluded), into build-gpu/bundle/{ember,lib/}. scripts/gpu-check.sh uses the bundle when
# it is there, and puts on the library path only the libraries the machine itself lacks.
#   usage: scripts/gpu-bundle.sh        (then carry build-gpu/bundle to the GPU machine)
set -euo pipefail
cd "$(dirname "$0")/.."
B=build-gpu/build
OUT=build-gpu/bundle
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_BUILD_TESTS=OFF -DEMBER_MPI=OFF \
  ${CMAKE_C_COMPILER_LAUNCHER:+-DCMAKE_C_COMPILER_LAUNCHER=$CMAKE_C_COMPILER_LAUNCHER} >/dev/null
cmake --build "$B" -j "$(nproc)" --target ember
rm -rf "$OUT"
mkdir -p "$OUT/lib"
cp "$B/tools/ember/ember" "$OUT/ember"
# every library ember and libember resolve, but the C library's own (same on every glibc system,
# and mixing two of them breaks the process)
ldd "$OUT/ember" | awk '/=>/ {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*|libresolv.so.*) ;;
    *) cp -L "$lib" "$OUT/lib/" ;;
  esac
done
du -sh "$OUT"
