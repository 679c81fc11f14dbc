#!/usr/bin/env bash
# Fetches scikit-learn's 8x8 handwritten digits (sklearn/datasets/data/digits.csv.gz, 1797
# images; the scikit-learn wheel only, without its dependencies) into DIR (default:
# build/digits) and prints the path of digits.csv.gz. Nothing is installed.
set -euo pipefail
dir="${1:-build/digits}"
mkdir -p "$dir"
if [ ! -f "$dir/digits.csv.gz" ]; then
  if ! ls "$dir"/scikit_learn-*.whl >/dev/null 2>&1; then
    py="${EMBER_PIP_PYTHON:-python3}"
    if ! "$py" -m pip --version >/dev/null 2>&1; then
      "$py" -m venv "$dir/venv" >&2
      py="$dir/venv/bin/python"
    fi
    "$py" -m pip download --quiet --no-deps "scikit-learn==1.9.1" -d "$dir" >&2
  fi
  whl=$(ls "$dir"/scikit_learn-*.whl | head -1)
  python3 - "$whl" "$dir/digits.csv.gz" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("sklearn/datasets/data/digits.csv.gz") as src, \
        open(sys.argv[2] + ".tmp", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  mv "$dir/digits.csv.gz.tmp" "$dir/digits.csv.gz"
fi
echo "$(cd "$dir" && pwd)/digits.csv.gz"
