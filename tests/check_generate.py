#!/usr/bin/env python3
"""`ember generate` on a test checkpoint gives transformers' greedy tokens.

Usage: check_generate.py FAMILY EMBER [ARGS...]
  FAMILY    a checkpoint under tests/fixtures/models/ whose <FAMILY>_ref bundle holds the prompt
            ("ids", row 0) and transformers' greedy continuation ("greedy"), written by
            scripts/gen_model_fixtures.py
  EMBER...  the command that runs the CLI (e.g. `qemu-x86_64 -cpu Haswell build/.../ember`)
Runs `EMBER generate --model <checkpoint> --ids <prompt> --greedy --print-ids` and exits
non-zero, saying where, when the tokens differ or the command fails (a signal included).
Needs only the Python standard library; EMBER_FIXTURES names the fixtures directory.
"""
import json
import os
import struct
import subprocess
import sys


def bundle_i64(ref, name):
    meta = json.load(open(ref + ".json"))
    t = meta["tensors"][name]
    assert t["dtype"] == "i64", f"{ref}: {name} is {t['dtype']}, not i64"
    with open(ref + ".bin", "rb") as f:
        f.seek(t["offset"])
        data = f.read(t["nbytes"])
    return list(struct.unpack(f"<{len(data) // 8}q", data)), t["shape"]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    family, ember = sys.argv[1], sys.argv[2:]
    fixtures = os.environ.get("EMBER_FIXTURES") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "fixtures")
    model = os.path.join(fixtures, "models", family)
    ref = os.path.join(fixtures, "models", family + "_ref")
    ids, shape = bundle_i64(ref, "ids")
    prompt = ids[: shape[-1]]
    want, _ = bundle_i64(ref, "greedy")
    cmd = ember + ["generate", "--model", model, "--ids", ",".join(map(str, prompt)),
                   "--max-new-tokens", str(len(want)), "--greedy", "--print-ids"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        sig = f" (signal {-r.returncode})" if r.returncode < 0 else ""
        sys.exit(f"FAIL: {' '.join(cmd)} exited with {r.returncode}{sig}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if got != want:
        sys.exit(f"FAIL: {family}: ember generate gave {got}, transformers' greedy tokens are {want}")
    print(f"{family}: {len(got)} greedy tokens equal transformers' ({' '.join(ember[:-1]) or 'native'})")


if __name__ == "__main__":
    main()
