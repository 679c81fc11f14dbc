#!/usr/bin/env python3
"""Data-parallel `ember train --dp 2` under mpirun against the single-process run and torch.

Usage: check_train_dp.py FAMILY MPIEXEC|none|device:KIND EMBER [ARGS...]
  FAMILY    a checkpoint under tests/fixtures/models/ with a tests/fixtures/train/<FAMILY>_run
            bundle (torch's 10 AdamW steps, scripts/gen_train_run_fixtures.py)
  MPIEXEC   mpirun (Open MPI), or `none` when Ember was built without MPI: then only the checks
            that need no second process run and the script exits 77 (skipped)
            device:KIND instead: the two ranks are devices 0 and 1 of KIND in one process
            (`--dp 2 --device xla`, XLA's CPU plugin with two devices); exits 77 without them
  EMBER...  the command that runs the CLI
Checks: (1) `mpirun -np 2 ember train --dp 2` with the bundle's flags (--no-shuffle) prints
torch's losses within 1e-5 absolute and grad norms within 1e-5 relative, and the same within
those bounds as the single-process run, which it must also match step for step with shuffling
on; (2) its final checkpoint's tensors equal the single-process checkpoint's within f32
rounding of 10 steps (relative 1e-5 of each tensor's largest magnitude); (3) resumed under
mpirun from its checkpoint-5 it prints the uninterrupted run's numbers exactly; (3b) with
--compile (one program per rank; on the device:KIND pair one program compiled for both
devices, its collectives inside) torch's numbers again and the eager --dp 2 run's within 2e-6;
(4) a batch
that does not divide by the world size, and --dp 2 without mpirun, fail naming the problem.
Needs only the Python standard library.
"""
import json
import os
import struct
import sys
import tempfile

# the CLI runner and output readers check_train.py uses (this file lives next to it)
from check_train import drop_rate, fail, run, steps


def read_safetensors(path):
    """{name: list of floats} for the f32 tensors of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            fail(f"{path}: {name} is {info['dtype']}, f32 expected")
        a, b = info["data_offsets"]
        out[name] = struct.unpack("<%df" % ((b - a) // 4), blob[8 + n + a:8 + n + b])
    return out


def compare_losses(got, want, what):
    if [s["step"] for s in got] != [s["step"] for s in want] or len(got) != len(want):
        fail(f"{what}: steps {[s['step'] for s in got]} vs {[s['step'] for s in want]}")
    for s, w in zip(got, want):
        if abs(s["loss"] - w["loss"]) > 1e-5:
            fail(f"{what} step {s['step']}: loss {s['loss']!r} vs {w['loss']!r}")
        if abs(s["grad_norm"] - w["grad_norm"]) > 1e-5 * abs(w["grad_norm"]):
            fail(f"{what} step {s['step']}: grad norm {s['grad_norm']!r} vs {w['grad_norm']!r}")
        if abs(s["lr"] - w["lr"]) > 1e-12 * max(1.0, abs(w["lr"])):
            fail(f"{what} step {s['step']}: lr {s['lr']!r} vs {w['lr']!r}")
    return max(abs(s["loss"] - w["loss"]) for s, w in zip(got, want))


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    family, mpiexec, ember = sys.argv[1], sys.argv[2], sys.argv[3:]
    fixtures = os.environ.get("EMBER_FIXTURES") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "fixtures")
    model = os.path.join(fixtures, "models", family)
    data = os.path.join(fixtures, "train", "ids.npy")
    meta = json.load(open(os.path.join(fixtures, "train", family + "_run.json")))["meta"]
    if meta["batch"] % 2:
        fail(f"the {family} bundle's batch {meta['batch']} does not divide by 2")
    base = ["--seq-len", str(meta["seq_len"]), "--steps", str(meta["steps"]),
            "--lr", repr(meta["lr"]), "--schedule", meta["schedule"],
            "--warmup", str(meta["warmup"]), "--weight-decay", repr(meta["weight_decay"]),
            "--beta1", repr(meta["beta1"]), "--beta2", repr(meta["beta2"]),
            "--eps", repr(meta["eps"]), "--grad-clip", repr(meta["grad_clip"]), "--json"]
    flags = base + ["--batch", str(meta["batch"]), "--no-shuffle"]

    if mpiexec.startswith("device:"):
        # two devices of one process (em_dist_local): XLA's CPU plugin with two devices
        kind = mpiexec[len("device:"):]
        os.environ.setdefault("EMBER_PJRT_OPTIONS", "cpu_device_count=2")
        mpi2, dp2 = ember, ["--dp", "2", "--device", kind]
        r = run(ember + ["train", "--model", model, "--data", data] + flags + dp2 + ["--steps", "1"])
        if "no device named" in r.stderr:
            print(f"SKIPPED: no {kind} devices (for xla: install xla-cpu-pjrt or set "
                  "EMBER_PJRT_XLA_PLUGIN)")
            sys.exit(77)
    else:
        # without mpirun, --dp 2 finds a world of one process
        r = run(ember + ["train", "--model", model, "--data", data] + flags + ["--dp", "2"])
        if r.returncode == 0 or "launch with mpirun -np 2" not in r.stderr:
            fail(f"--dp 2 without mpirun: exit {r.returncode}, stderr {r.stderr!r}")
        print(f"--dp 2 alone: {r.stderr.strip().splitlines()[-1]}")
        if mpiexec == "none":
            print("SKIPPED: Ember was built without MPI (EMBER_MPI=OFF): install libopenmpi-dev "
                  "openmpi-bin (scripts/deps.sh) to run data-parallel training under mpirun")
            sys.exit(77)
        mpi2 = [mpiexec, "--oversubscribe", "--timeout", "300", "-np", "2"] + ember
        dp2 = ["--dp", "2"]

    with tempfile.TemporaryDirectory() as tmp:
        one, two = os.path.join(tmp, "one"), os.path.join(tmp, "two")
        r = run(ember + ["train", "--model", model, "--data", data] + flags + ["--out", one])
        if r.returncode != 0:
            fail(f"single-process run exited with {r.returncode}:\n{r.stderr}")
        single = steps(r.stdout)
        cmd = mpi2 + ["train", "--model", model, "--data", data] + flags + [
            "--out", two, "--save-every", "5"] + dp2
        r = run(cmd)
        if r.returncode != 0:
            fail(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stderr}")
        dp_lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        dp = steps(r.stdout)  # rank 0 alone prints: a second rank's lines would double them
        torch = [{"step": i, "loss": lo, "lr": lr, "grad_norm": g} for i, (lo, lr, g) in
                 enumerate(zip(meta["losses"], meta["lrs"], meta["grad_norms"]))]
        w_torch = compare_losses(dp, torch, "--dp 2 vs torch")
        w_one = compare_losses(dp, single, "--dp 2 vs one process")
        print(f"{family} --dp 2: {len(dp)} steps, losses within {w_torch:.2g} of torch's, "
              f"{w_one:.2g} of one process's")

        # --compile: the averaging's collectives are ops of the traced step (the CPU plan runs
        # them over MPI; on two PJRT devices they are compiled into the step, one program for
        # both devices); torch's numbers, and the eager --dp 2 run's within f32 rounding
        cmd = mpi2 + ["train", "--model", model, "--data", data] + flags + dp2 + ["--compile"]
        os.environ["EMBER_LOG_COMPILES"] = "1"  # mpirun's local ranks inherit it
        r = run(cmd)
        del os.environ["EMBER_LOG_COMPILES"]
        if r.returncode != 0:
            fail(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stderr}")
        compiles = [ln for ln in r.stderr.splitlines()
                    if ln.startswith("ember compile: train_step")]
        if len(compiles) != 2:  # one program per rank for the 10 steps
            fail(f"--compile --dp 2 compiled {len(compiles)} programs on 2 ranks:\n{r.stderr}")
        if mpiexec.startswith("device:"):  # one XLA program for the two devices
            progs = [ln for ln in r.stderr.splitlines()
                     if "compile graph" in ln and "x2 replicas on" in ln]
            if len(progs) != 1:
                fail(f"--compile --dp 2 on {kind}: {len(progs)} two-device programs, want 1:\n"
                     f"{r.stderr}")
        dpc = steps(r.stdout)
        wc_torch = compare_losses(dpc, torch, "--compile --dp 2 vs torch")
        wc_eager = max(abs(a["loss"] - b["loss"]) for a, b in zip(dpc, dp))
        for a, b in zip(dpc, dp):
            if abs(a["loss"] - b["loss"]) > 2e-6 or \
                    abs(a["grad_norm"] - b["grad_norm"]) > 2e-6 * abs(b["grad_norm"]):
                fail(f"--compile --dp 2 step {a['step']}: {a} vs eager {b}")
        print(f"{family} --compile --dp 2: one program per rank, losses within "
              f"{wc_torch:.2g} of torch's, {wc_eager:.2g} of the eager --dp 2 run's")

        # the checkpoints: the same weights up to the summation order's rounding
        a = read_safetensors(os.path.join(one, "model.safetensors"))
        b = read_safetensors(os.path.join(two, "model.safetensors"))
        if sorted(a) != sorted(b):
            fail(f"checkpoint tensors differ: {sorted(a)} vs {sorted(b)}")
        worst = 0.0
        for name in a:
            scale = max(max(abs(x) for x in a[name]), 1e-30)
            d = max(abs(x - y) for x, y in zip(a[name], b[name])) / scale
            if d > 1e-5:
                fail(f"checkpoint {name}: differs by {d:.3g} of its largest magnitude")
            worst = max(worst, d)
        print(f"checkpoints: {len(a)} tensors, largest difference {worst:.2g} of a tensor's "
              f"largest magnitude")

        # resumed under mpirun: the uninterrupted --dp 2 run's numbers, digit for digit
        r = run(mpi2 + ["train", "--resume", os.path.join(two, "checkpoint-5"), "--data", data]
                + flags + dp2)
        if r.returncode != 0:
            fail(f"--dp 2 resume exited with {r.returncode}:\n{r.stderr}")
        got = [drop_rate(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
        want = [drop_rate(ln) for ln in dp_lines[5:]]
        if got != want:
            fail("resumed --dp 2 run differs:\n" + "\n".join(got) + "\nuninterrupted:\n" +
                 "\n".join(want))
        print("--dp 2: 5 steps + resume 5 steps print the uninterrupted run's numbers exactly")

        # shuffled: the ranks read the windows one process reads (batch 4, 2 per rank)
        sh = base + ["--batch", "4", "--seed", "7", "--steps", "4"]
        r1 = run(ember + ["train", "--model", model, "--data", data] + sh)
        r2 = run(mpi2 + ["train", "--model", model, "--data", data] + sh + dp2)
        if r1.returncode or r2.returncode:
            fail(f"shuffled runs exited with {r1.returncode}, {r2.returncode}:\n{r1.stderr}"
                 f"\n{r2.stderr}")
        w = compare_losses(steps(r2.stdout), steps(r1.stdout), "shuffled --dp 2 vs one process")
        print(f"shuffled, batch 4: --dp 2 within {w:.2g} of one process")

        # a batch the world does not divide
        bad = [x for x in flags if x != "--json"]
        bad[bad.index("--batch") + 1] = "3"
        r = run(mpi2 + ["train", "--model", model, "--data", data] + bad + dp2)
        want = "batch 3 does not divide by the data-parallel world size 2"
        if r.returncode == 0 or want not in r.stderr:
            fail(f"batch 3, --dp 2: exit {r.returncode}, stderr {r.stderr!r}; '{want}' expected")
        print(f"batch 3: {[ln for ln in r.stderr.splitlines() if want in ln][0]}")

        if not mpiexec.startswith("device:"):
            # mpirun's ranks train on the CPU: a PJRT device for each process is refused
            ok = [x for x in flags if x != "--json"]
            r = run(mpi2 + ["train", "--model", model, "--data", data] + ok + dp2
                    + ["--device", "xla:0"])
            want = "trains on the CPU"
            if r.returncode == 0 or want not in r.stderr:
                fail(f"--dp 2 --device xla:0 under mpirun: exit {r.returncode}, stderr "
                     f"{r.stderr!r}; '{want}' expected")
            print("--device xla:0 under mpirun: refused")


if __name__ == "__main__":
    main()
