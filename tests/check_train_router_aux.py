#!/usr/bin/env python3
"""`ember train` adds the MoE router's load-balancing loss when the checkpoint's config asks for
it (output_router_logits, weighted by router_aux_loss_coef), as transformers' MoE models do.

Usage: check_train_router_aux.py FAMILY EMBER [ARGS...]
Copies tests/fixtures/models/FAMILY's config with output_router_logits true and the
router_aux_loss_coef of tests/fixtures/train/FAMILY_aux_grads (its weights linked, not copied),
runs one `--no-shuffle` step on tests/fixtures/train/ids.npy (windows 0 and 1 of 16 ids) and
compares the step's loss with transformers' on the same windows (scripts/gen_train_fixtures.py),
within 1e-5; the same config with output_router_logits false gives the LM loss alone; with
--compile (the expert counts are ops on the device, so the loss is traced) both give the eager
step's loss (2e-6).
Needs only the Python standard library.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile


def fixture_f64(bundle, name):
    meta = json.load(open(bundle + ".json"))
    t = meta["tensors"][name]
    with open(bundle + ".bin", "rb") as f:
        f.seek(t["offset"])
        return struct.unpack("<d", f.read(8))[0], meta["meta"]


def step0_loss(ember, model, data, extra=()):
    r = subprocess.run(ember + ["train", "--model", model, "--data", data, "--seq-len", "16",
                                "--batch", "2", "--steps", "1", "--lr", "1e-3", "--no-shuffle",
                                "--json", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if r.returncode != 0:
        sys.exit("FAIL: ember train exited %d: %s" % (r.returncode, r.stderr[-2000:]))
    return [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")][0]["loss"]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    family, ember = sys.argv[1], sys.argv[2:]
    fixtures = os.environ.get("EMBER_FIXTURES") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "fixtures")
    src = os.path.join(fixtures, "models", family)
    bundle = os.path.join(fixtures, "train", family + "_aux_grads")
    want, meta = fixture_f64(bundle, "window_loss")
    want_lm, _ = fixture_f64(bundle, "window_loss_lm")
    data = os.path.join(fixtures, "train", "ids.npy")
    with tempfile.TemporaryDirectory() as tmp:
        for on in (True, False):
            d = os.path.join(tmp, "on" if on else "off")
            os.mkdir(d)
            for f in os.listdir(src):
                if f != "config.json":
                    os.symlink(os.path.abspath(os.path.join(src, f)), os.path.join(d, f))
            cfg = json.load(open(os.path.join(src, "config.json")))
            cfg["output_router_logits"] = on
            cfg["router_aux_loss_coef"] = meta["router_aux_loss_coef"]
            json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
            got = step0_loss(ember, d, data)
            w = want if on else want_lm
            print("%s output_router_logits %s: loss %.9g, transformers %.9g" % (family, on, got, w))
            if abs(got - w) > 1e-5:
                sys.exit("FAIL: %s step-0 loss %.9g, transformers %.9g" % (family, got, w))
            # --compile: the whole loss traced (the routing and the expert counts on the device),
            # equal to the eager step's
            gc = step0_loss(ember, d, data, ["--compile"])
            print("%s output_router_logits %s --compile: loss %.9g" % (family, on, gc))
            if abs(gc - got) > 2e-6:
                sys.exit("FAIL: %s compiled step-0 loss %.9g, eager %.9g" % (family, gc, got))
    print("ok")


if __name__ == "__main__":
    main()
