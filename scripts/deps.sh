#!/usr/bin/env bash
# Installs the Debian packages Ember builds against (idempotent; needs root or sudo).
set -euo pipefail
PKGS="build-essential cmake ninja-build pkg-config libjansson-dev libpcre2-dev libutf8proc-dev libcurl4-openssl-dev libopenblas-dev clang libclang-rt-14-dev python3 python3-venv qemu-user libopenmpi-dev openmpi-bin libmicrohttpd-dev libpng-dev zlib1g-dev curl"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
