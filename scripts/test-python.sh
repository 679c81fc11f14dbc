#!/usr/bin/env bash
# The Python package from a clean venv: `pip install .` builds libember through the project's
# CMake (scikit-build-core, pinned below) and installs the `ember` package; pytest then runs
# tests/python against the committed fixtures (transformers' logits and greedy tokens, the
# tokenizers library's ids, numpy). Needs PyPI for the pinned build and test packages only.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/py-venv
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check scikit-build-core==1.1.2 cffi==2.1.1 \
  numpy==2.4.6 pytest==9.2.0
# no build isolation: the pinned scikit-build-core above builds it, nothing else is fetched
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$venv/bin/pip" install -q --disable-pip-version-check \
  --no-build-isolation .
# from outside the source tree, so that `import ember` is the installed package
cd build && "../$venv/bin/python" -m pytest -q -p no:cacheprovider ../tests/python
