#!/usr/bin/env python3
"""`ember train` against torch: the losses, learning rates and grad norms of 10 AdamW steps on a
tiny checkpoint, a resumed run, and the errors for bad input.

Usage: check_train.py [--device D] FAMILY EMBER [ARGS...]
  --device  train on D (e.g. xla:0: the weights, the gradients and AdamW's state live there);
            exits 77 (skipped) when the device is not found
  FAMILY    a checkpoint under tests/fixtures/models/ whose tests/fixtures/train/<FAMILY>_run bundle
            scripts/gen_train_run_fixtures.py wrote (torch's run on tests/fixtures/train/ids.npy)
  EMBER...  the command that runs the CLI
Checks: (1) `ember train --no-shuffle --json` with the bundle's flags gives torch's losses within
1e-5 absolute, grad norms within 1e-5 relative (or 4 times torch's own f32 noise where the
bundle records it and that is larger: gemma4, see torch_tol) and the same learning rates; (2) the
run saved with --save-every 5, resumed from DIR/checkpoint-5, prints steps 5..9 identical to the
uninterrupted run's (the printed 17-digit numbers: bit-identical), and `ember generate` loads the saved
checkpoint; (3) with --gradient-checkpointing (every layer recomputed in the backward) the
losses and grad norms are torch's too and within 1e-5 of the run without; (3b) with --compile
(the whole step traced once: one program, counted from EMBER_LOG_COMPILES' lines) torch's
numbers and the eager run's within 2e-6, and a compiled run resumed from its checkpoint-5
prints the uninterrupted compiled run's numbers exactly; (4) data shorter than
one window, a float
.npy, an id outside the vocabulary and a --seq-len above max_position_embeddings each fail with a
message naming the problem. Needs only the Python standard library.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def fail(msg):
    sys.exit("FAIL: " + msg)


def write_npy(path, descr, values, fmt):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (descr, len(values))
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))


def fixtures_dir():
    """EMBER_FIXTURES, or tests/fixtures next to this script."""
    return os.environ.get("EMBER_FIXTURES") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "fixtures")


def train_flags(meta):
    """The `ember train` flags of a fixture run's hyper-parameters (its bundle's "meta"), without
    shuffling, one JSON line a step (shared with check_train_bf16.py)."""
    return ["--seq-len", str(meta["seq_len"]), "--batch", str(meta["batch"]),
            "--steps", str(meta["steps"]), "--lr", repr(meta["lr"]),
            "--schedule", meta["schedule"], "--warmup", str(meta["warmup"]),
            "--weight-decay", repr(meta["weight_decay"]), "--beta1", repr(meta["beta1"]),
            "--beta2", repr(meta["beta2"]), "--eps", repr(meta["eps"]),
            "--grad-clip", repr(meta["grad_clip"]), "--no-shuffle", "--json"]


def steps(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def torch_tol(meta, step):
    """The loss (absolute) and grad-norm (relative) tolerances against torch at step: 1e-5, or 4
    times torch's own f32 noise where the fixture records it (gemma4: the distance of its f32 run
    from the same run in f64, the largest so far; no f32 run can follow torch closer)."""
    noise = meta.get("f32_noise")
    if not noise:
        return 1e-5, 1e-5
    return max(1e-5, 4 * noise["loss"][step]), max(1e-5, 4 * noise["grad_norm"][step])


def main():
    argv = sys.argv[1:]
    device = None
    if argv[:1] == ["--device"] and len(argv) > 1:
        device, argv = argv[1], argv[2:]
    if len(argv) < 2:
        sys.exit(__doc__)
    family, ember = argv[0], argv[1:]
    fixtures = fixtures_dir()
    model = os.path.join(fixtures, "models", family)
    data = os.path.join(fixtures, "train", "ids.npy")
    meta = json.load(open(os.path.join(fixtures, "train", family + "_run.json")))["meta"]
    flags = train_flags(meta)
    if device:
        flags += ["--device", device]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        cmd = ember + ["train", "--model", model, "--data", data] + flags + [
            "--out", out, "--save-every", "5"]
        r = run(cmd)
        if device and "no device named" in r.stderr:
            print(f"SKIPPED: no {device} device (for xla: install xla-cpu-pjrt or set "
                  "EMBER_PJRT_XLA_PLUGIN)")
            sys.exit(77)
        if r.returncode != 0:
            fail(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stderr}")
        got = steps(r.stdout)
        first = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if [s["step"] for s in got] != list(range(meta["steps"])):
            fail(f"steps printed: {r.stdout}")
        for s, want_loss, want_lr, want_norm in zip(got, meta["losses"], meta["lrs"],
                                                     meta["grad_norms"]):
            tl, tn = torch_tol(meta, s["step"])
            if abs(s["loss"] - want_loss) > tl:
                fail(f"{family} step {s['step']}: loss {s['loss']!r}, torch {want_loss!r} "
                     f"(tolerance {tl:.2g})")
            if abs(s["lr"] - want_lr) > 1e-12 * max(1.0, abs(want_lr)):
                fail(f"{family} step {s['step']}: lr {s['lr']!r}, torch {want_lr!r}")
            if abs(s["grad_norm"] - want_norm) > tn * abs(want_norm):
                fail(f"{family} step {s['step']}: grad norm {s['grad_norm']!r}, "
                     f"torch {want_norm!r} (tolerance {tn:.2g} relative)")
            if not s["tokens_per_s"] > 0:
                fail(f"tokens_per_s {s['tokens_per_s']!r}")
        worst = max(abs(s["loss"] - w) for s, w in zip(got, meta["losses"]))
        print(f"{family}: 10 steps, losses {got[0]['loss']:.6f} -> {got[-1]['loss']:.6f}, "
              f"within {worst:.2g} of torch's")
        for f in ("model.safetensors", "config.json", "generation_config.json",
                  "trainer_state.safetensors"):
            for d in (out, os.path.join(out, "checkpoint-5")):
                if not os.path.exists(os.path.join(d, f)):
                    fail(f"{d}/{f} missing")
        # `ember generate` loads the checkpoint
        r = run(ember + ["generate", "--model", out, "--ids", "5,6,7", "--max-new-tokens", "4",
                         "--greedy", "--print-ids"])
        if r.returncode != 0:
            fail(f"ember generate on the trained checkpoint exited with {r.returncode}:\n{r.stderr}")
        # gradient checkpointing: the same run, recomputing each layer in the backward
        r = run(ember + ["train", "--model", model, "--data", data] + flags +
                ["--gradient-checkpointing"])
        if r.returncode != 0:
            fail(f"--gradient-checkpointing exited with {r.returncode}:\n{r.stderr}")
        diff = against_base(family, "--gradient-checkpointing", steps(r.stdout), got, meta, 1e-5)
        print(f"{family}: --gradient-checkpointing, 10 steps within {diff:.2g} of the run without")
        # --compile: the whole step traced once (one program, counted by EMBER_LOG_COMPILES'
        # lines), torch's numbers and the eager run's within f32 rounding; a compiled run
        # resumed from its step-5 checkpoint prints the uninterrupted compiled run's numbers
        out_c = os.path.join(tmp, "out_compiled")
        env = dict(os.environ, EMBER_LOG_COMPILES="1")
        cmd = ember + ["train", "--model", model, "--data", data] + flags + [
            "--compile", "--out", out_c, "--save-every", "5"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        if r.returncode != 0:
            fail(f"--compile exited with {r.returncode}:\n{r.stderr}")
        compiles = [ln for ln in r.stderr.splitlines() if ln.startswith("ember compile: train_step")]
        if len(compiles) != 1:
            fail(f"--compile compiled {len(compiles)} programs for 10 steps:\n{r.stderr}")
        c_lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        diff = against_base(family, "--compile", steps(r.stdout), got, meta, 2e-6)
        print(f"{family}: --compile, one program ({compiles[0].split(': ', 2)[2][:60]}...), "
              f"10 steps within {diff:.2g} of the eager run")
        r = run(ember + ["train", "--resume", os.path.join(out_c, "checkpoint-5"), "--data",
                         data] + flags + ["--compile"])
        if r.returncode != 0:
            fail(f"--compile resume exited with {r.returncode}:\n{r.stderr}")
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if [drop_rate(ln) for ln in lines] != [drop_rate(ln) for ln in c_lines[5:]]:
            fail("compiled resumed run differs:\n" + "\n".join(lines) + "\nuninterrupted:\n" +
                 "\n".join(c_lines[5:]))
        print(f"{family}: --compile, 5 steps + resume 5 steps print the uninterrupted run's "
              "numbers exactly")
        # resumed from the step-5 checkpoint: the same numbers, digit for digit
        ck = os.path.join(out, "checkpoint-5")
        r = run(ember + ["train", "--resume", ck, "--data", data] + flags)
        if r.returncode != 0:
            fail(f"resume exited with {r.returncode}:\n{r.stderr}")
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        full = first[5:]
        strip = [drop_rate(ln) for ln in lines]
        if strip != [drop_rate(ln) for ln in full]:
            fail("resumed run differs:\n" + "\n".join(strip) + "\nuninterrupted:\n" +
                 "\n".join(drop_rate(ln) for ln in full))
        print(f"{family}: 5 steps + resume 5 steps print the uninterrupted run's numbers exactly")

        bad = [
            ("short", "<i8", list(range(3, 13)), "q", [], "fewer than one window"),
            ("float", "<f4", [1.0] * 64, "f", [], "must be integers"),
            ("vocab", "<i8", [5] * 40 + [100000] + [5] * 40, "q", [], "outside the model's vocabulary"),
            ("long", "<i8", [5] * 400, "q", ["--seq-len", "1000"], "max_position_embeddings"),
        ]
        for name, descr, vals, fmt, extra, want in bad:
            p = os.path.join(tmp, name + ".npy")
            write_npy(p, descr, vals, fmt)
            f2 = [x for x in flags if x != "--json"]
            r = run(ember + ["train", "--model", model, "--data", p] + f2 + extra)
            if r.returncode == 0 or want not in r.stderr:
                fail(f"{name}: exit {r.returncode}, stderr {r.stderr!r}; '{want}' expected")
            print(f"{name}: {r.stderr.strip().splitlines()[-1]}")


def against_base(family, what, run_steps, base_steps, meta, tol):
    """Checks a variant's run (`what`) against torch's numbers (torch_tol) and the base run's (tol,
    absolute for the loss, relative for the grad norm); returns the largest loss difference."""
    if len(run_steps) != len(base_steps):
        fail(f"{what} printed {len(run_steps)} steps")
    diff = 0.0
    for s, base, want_loss, want_norm in zip(run_steps, base_steps, meta["losses"],
                                             meta["grad_norms"]):
        tl, tn = torch_tol(meta, s["step"])
        if abs(s["loss"] - want_loss) > tl or abs(s["loss"] - base["loss"]) > tol:
            fail(f"{family} step {s['step']} {what}: loss {s['loss']!r}, without "
                 f"{base['loss']!r}, torch {want_loss!r}")
        if (abs(s["grad_norm"] - want_norm) > tn * abs(want_norm) or
                abs(s["grad_norm"] - base["grad_norm"]) > tol * abs(base["grad_norm"])):
            fail(f"{family} step {s['step']} {what}: grad norm {s['grad_norm']!r}, without "
                 f"{base['grad_norm']!r}, torch {want_norm!r}")
        diff = max(diff, abs(s["loss"] - base["loss"]))
    return diff


def drop_rate(line):
    """A step's line without tokens_per_s (a timing)."""
    d = json.loads(line)
    d.pop("tokens_per_s", None)
    return json.dumps(d)


if __name__ == "__main__":
    main()
