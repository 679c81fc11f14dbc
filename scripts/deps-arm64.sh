#!/usr/bin/env bash
# Installs what the aarch64 cross build and its emulated test run need (idempotent; needs root or
# sudo): Debian's cross compiler, qemu-user, and the arm64 multiarch -dev packages of Ember's
# dependencies (which bring the arm64 C library the tests run on under qemu-aarch64).
set -euo pipefail
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
fi
PKGS="gcc-aarch64-linux-gnu qemu-user libjansson-dev:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libcurl4-openssl-dev:arm64"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi
