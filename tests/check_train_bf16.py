#!/usr/bin/env python3
"""`ember train --dtype bf16` (bf16 weights and activations, f32 masters and AdamW state) against
torch's bf16 mixed-precision runs of scripts/gen_train_bf16_fixtures.py.

Usage: check_train_bf16.py FAMILY EMBER [ARGS...]
  FAMILY    a checkpoint under tests/fixtures/models/ with a tests/fixtures/train/<FAMILY>_bf16.json
  EMBER...  the command that runs the CLI
The fixture holds torch's 10 steps (the f32 fixture's data and hyper-parameters) in three
precisions: "f32", "autocast" (f32 parameters, forward under torch.autocast bf16) and "master"
(bf16 parameters with f32 masters: Ember's design, the closest torch variant).
Checks, on the 10 losses and grad norms of `ember train --no-shuffle --json --dtype bf16`:
  (1) every loss within LOSS_TOL of torch's "master" run and every grad norm within NORM_TOL
      relative of it;
  (2) summed over the 10 steps, Ember's losses are nearer torch's "master" run than its f32 run.
Needs only the Python standard library.
"""
import json
import os
import subprocess
import sys

from check_train import fail, fixtures_dir, train_flags

# Tolerances, from the measured spread (torch 2.x on the CPU; tests/fixtures/train/*_bf16.json).
# On these tiny models the logits are small (|logit| < 0.45, so the loss stays near log 256) and
# bf16 moves the loss little: torch's bf16-master run differs from its f32 run by up to 3.2e-4
# (qwen3) and 4.0e-4 (llama), about as much as two correct bf16 implementations differ from each
# other: torch's own two (autocast vs bf16-master) by up to 4.7e-4 and 3.4e-4, and at step 0,
# on identical bf16 weights, transformers' sdpa vs eager attention, or RMSNorm rounded once
# instead of twice, already moves the loss by up to 1.5e-4 (bf16 rounds each activation
# differently with each order of operations). So a third bf16 implementation (Ember) is held to
# the smaller of torch's two-mode spreads (3.4e-4, rounded down to 3e-4) per step, and to torch's
# bf16 rather than f32 run only in aggregate (2): per step the two are not apart by more than the
# noise. Grad norms: torch autocast vs bf16-master differ by up to 1.6e-3 and 1.4e-3 relative,
# bf16-master vs f32 by 1.5e-3 and 1.4e-3; NORM_TOL is 1.2e-3, under all of them.
# Measured (2026-12-03): Ember vs torch bf16-master, losses 2.2e-4 (qwen3) and 1.3e-4 (llama),
# grad norms 9.6e-4 and 1.0e-3 relative; summed |loss differences| to bf16-master vs to f32:
# 1.0e-3 vs 1.6e-3 (qwen3), 7.5e-4 vs 9.7e-4 (llama).
# Ember's f32 run put through these checks fails them (qwen3: step 2's grad norm, 1.5e-3
# relative; llama: step 5's loss, 4.0e-4), and fails (2) too.
LOSS_TOL = 3e-4
NORM_TOL = 1.2e-3


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    family, ember = sys.argv[1], sys.argv[2:]
    fixtures = fixtures_dir()
    ref = json.load(open(os.path.join(fixtures, "train", family + "_bf16.json")))
    meta = ref["meta"]
    flags = train_flags(meta) + ["--dtype", "bf16"]
    cmd = ember + ["train", "--model", os.path.join(fixtures, "models", family),
                   "--data", os.path.join(fixtures, "train", "ids.npy")] + flags
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited with {r.returncode}:\n{r.stderr}")
    got = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    if [s["step"] for s in got] != list(range(meta["steps"])):
        fail(f"steps printed: {r.stdout}")
    loss = [s["loss"] for s in got]
    norm = [s["grad_norm"] for s in got]
    bf, f32, ac = ref["master"], ref["f32"]["losses"], ref["autocast"]["losses"]
    for s in range(len(loss)):
        print(f"{family} step {s}: ember {loss[s]:.6f}  torch master {bf['losses'][s]:.6f}  "
              f"autocast {ac[s]:.6f}  f32 {f32[s]:.6f}  | grad norm ember {norm[s]:.6f} "
              f"torch master {bf['grad_norms'][s]:.6f}")
    # (1) near torch's bf16-master run
    for s in range(len(loss)):
        if abs(loss[s] - bf["losses"][s]) > LOSS_TOL:
            fail(f"{family} step {s}: loss {loss[s]!r}, torch bf16-master {bf['losses'][s]!r} "
                 f"(tolerance {LOSS_TOL}; torch f32 {f32[s]!r})")
        if abs(norm[s] - bf["grad_norms"][s]) > NORM_TOL * bf["grad_norms"][s]:
            fail(f"{family} step {s}: grad norm {norm[s]!r}, torch bf16-master "
                 f"{bf['grad_norms'][s]!r} (relative tolerance {NORM_TOL})")
    # (2) nearer torch's bf16 run than its f32 run, summed over the steps
    to_bf = sum(abs(a - b) for a, b in zip(loss, bf["losses"]))
    to_f32 = sum(abs(a - b) for a, b in zip(loss, f32))
    if not to_bf < to_f32:
        fail(f"{family}: summed |loss - torch bf16-master| {to_bf:.3g} is not below summed "
             f"|loss - torch f32| {to_f32:.3g}")
    worst = max(abs(a - b) for a, b in zip(loss, bf["losses"]))
    spread = max(abs(a - b) for a, b in zip(bf["losses"], f32))
    wnorm = max(abs(a - b) / b for a, b in zip(norm, bf["grad_norms"]))
    print(f"{family}: bf16 losses within {worst:.2g} of torch's bf16-master run (tolerance "
          f"{LOSS_TOL}; torch bf16 vs f32 up to {spread:.2g}), grad norms within {wnorm:.2g} "
          f"relative; summed over the steps |ember - bf16-master| {to_bf:.2g}, "
          f"|ember - f32| {to_f32:.2g}")


if __name__ == "__main__":
    main()
