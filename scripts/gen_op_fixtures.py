#!/usr/bin/env python3
"""Generates the op test fixtures in tests/fixtures/ops/ from torch and numpy.

Usage: python scripts/gen_op_fixtures.py [family ...]
Needs the pinned versions of scripts/requirements-fixtures.txt. Each family is a module
scripts/fixtures/ops_<family>.py with a function build(writer).
"""
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from fixtures.common import Writer  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "ops")


def families():
    names = []
    for f in sorted(os.listdir(os.path.join(HERE, "fixtures"))):
        if f.startswith("ops_") and f.endswith(".py"):
            names.append(f[4:-3])
    return names


def main():
    want = sys.argv[1:] or families()
    for fam in want:
        mod = importlib.import_module("fixtures.ops_" + fam)
        w = Writer(fam, OUT)
        mod.build(w)
        n, size = w.write()
        print(f"{fam}: {n} cases, {size} bytes")


if __name__ == "__main__":
    main()
