#!/usr/bin/env python3
"""Records 10 AdamW steps of torch training on the tiny checkpoints of tests/fixtures/models/, driven
by exactly the windows `ember train --no-shuffle` reads, and the logits of the model it trained.

Usage: python scripts/gen_train_run_fixtures.py [family ...]   (default: qwen3 llama gemma4_text gemma4)
       python scripts/gen_train_run_fixtures.py --check DIR FAMILY    (transformers loads Ember's
                                                                      checkpoint DIR: its logits)
Needs the pinned versions of scripts/requirements-fixtures.txt.

Writes tests/fixtures/train/ids.npy (300 int64 ids drawn in [3, 256), seed 11: 18 windows of 16,
so the 20 windows of 10 steps of batch 2 wrap around) and tests/fixtures/train/<family>_run.{json,bin}
(a Bundle): meta holds the hyper-parameters (the `ember train` flags) and per step the loss before
the update, the learning rate the update used, and clip_grad_norm_'s total norm (also as f64
tensors "loss", "lr", "grad_norm"); "eval_ids" [2, 16] and "logits" [2, 16, vocab]: the trained
model's logits on them; meta "f32_noise": how far torch's own f32 run is from the same run in
f64 (per step the largest |loss difference| and relative grad-norm difference so far, and the
largest |logits difference|; also as f64 tensors "noise_loss", "noise_grad_norm" and meta
"f32_noise_logits"), which bounds how closely any f32 run can follow it (Gemma 4's tiny
checkpoints amplify rounding past 1e-5 within 10 steps; qwen3 and llama stay near 1e-7). The run: torch.optim.AdamW(model.parameters()) (one group), transformers'
get_cosine_schedule_with_warmup, clip_grad_norm_, loss = model(input_ids=x, labels=x).loss with
x = windows (s*B + b) mod K, all in float32.
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

MODELS = os.path.join(HERE, "..", "tests", "fixtures", "models")
OUT = os.path.join(HERE, "..", "tests", "fixtures", "train")
HP = {"seq_len": 16, "batch": 2, "steps": 10, "lr": 5e-3, "warmup": 3, "weight_decay": 0.1,
      "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "grad_clip": 0.45, "schedule": "cosine"}


def make_ids():
    rng = np.random.default_rng(11)
    ids = rng.integers(3, 256, size=300, dtype=np.int64)
    os.makedirs(OUT, exist_ok=True)
    np.save(os.path.join(OUT, "ids.npy"), ids)
    return ids


def eval_ids():
    g = torch.Generator().manual_seed(5)
    return torch.randint(3, 256, (2, HP["seq_len"]), generator=g)


def train(family, ids, dtype, **kw):
    """The 10 steps in dtype: (losses, lrs, grad norms, the trained model's logits on eval_ids)."""
    from transformers import AutoModelForCausalLM, get_cosine_schedule_with_warmup
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, family), dtype=dtype, **kw)
    model.train()
    T, B, N = HP["seq_len"], HP["batch"], HP["steps"]
    windows = torch.from_numpy(ids[: len(ids) // T * T].reshape(-1, T))
    K = windows.shape[0]
    opt = torch.optim.AdamW(model.parameters(), lr=HP["lr"], betas=(HP["beta1"], HP["beta2"]),
                            eps=HP["eps"], weight_decay=HP["weight_decay"])
    sched = get_cosine_schedule_with_warmup(opt, HP["warmup"], N)
    losses, lrs, norms = [], [], []
    for s in range(N):
        x = windows[[(s * B + b) % K for b in range(B)]]
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), HP["grad_clip"])
        lrs.append(float(opt.param_groups[0]["lr"]))
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(float(loss.item()))
        norms.append(float(norm.item()))
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=eval_ids()).logits
    return losses, lrs, norms, logits


def running_max(xs):
    out, m = [], 0.0
    for x in xs:
        m = max(m, x)
        out.append(m)
    return out


def record(family, ids):
    losses, lrs, norms, logits = train(family, ids, torch.float32)
    # torch's own f32 noise: the same run in f64 (grouped_mm has no f64: eager experts), the
    # largest distance so far at each step (chaotic training amplifies rounding step by step)
    l64, _, n64, g64 = train(family, ids, torch.float64, experts_implementation="eager")
    noise = {"loss": running_max([abs(a - b) for a, b in zip(losses, l64)]),
             "grad_norm": running_max([abs(a - b) / b for a, b in zip(norms, n64)]),
             "logits": (logits.double() - g64).abs().max().item()}
    e = eval_ids()
    b = Bundle(os.path.join(OUT, family + "_run"))
    b.add("loss", torch.tensor(losses, dtype=torch.float64))
    b.add("lr", torch.tensor(lrs, dtype=torch.float64))
    b.add("grad_norm", torch.tensor(norms, dtype=torch.float64))
    b.add("eval_ids", e)
    b.add("logits", logits)
    b.add("noise_loss", torch.tensor(noise["loss"], dtype=torch.float64))
    b.add("noise_grad_norm", torch.tensor(noise["grad_norm"], dtype=torch.float64))
    b.meta = dict(HP, family=family, windows=len(ids) // HP["seq_len"], losses=losses, lrs=lrs,
                  grad_norms=norms, f32_noise=noise,
                  f32_noise_logits=noise["logits"])
    n, size = b.write()
    print(f"{family}: losses {losses[0]:.5f} -> {losses[-1]:.5f}; {n} tensors, {size} bytes; "
          f"f32 noise: loss {noise['loss'][-1]:.2g}, grad norm {noise['grad_norm'][-1]:.2g} "
          f"relative, logits {noise['logits']:.2g}")


def check(ckpt, family):
    """transformers loads Ember's checkpoint (every weight present: no missing key, so Gemma 4's
    layer_scalar buffers too) and gives the logits of its own trained model, within 1e-4 or 4
    times torch's own f32 noise where the fixture records it; returns (error, tolerance)."""
    import json
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32,
                                                       output_loading_info=True)
    model.eval()
    if info["missing_keys"] or info["unexpected_keys"]:
        print(f"{family}: {ckpt}: missing {sorted(info['missing_keys'])}, unexpected "
              f"{sorted(info['unexpected_keys'])}")
        return float("inf"), 0.0
    meta = json.load(open(os.path.join(OUT, family + "_run.json")))
    t = meta["tensors"]["logits"]
    with open(os.path.join(OUT, family + "_run.bin"), "rb") as f:
        f.seek(t["offset"])
        want = torch.from_numpy(np.frombuffer(f.read(t["nbytes"]), dtype=np.float32)
                                .reshape(t["shape"]).copy())
    with torch.no_grad():
        got = model(input_ids=eval_ids()).logits
    err = (got - want).abs().max().item()
    tol = max(1e-4, 4 * meta["meta"].get("f32_noise_logits", 0.0))
    print(f"{family}: transformers on {ckpt}: max |logits - torch-trained logits| = {err:.3g} "
          f"(tolerance {tol:.2g})")
    return err, tol


def main():
    if sys.argv[1:2] == ["--check"]:
        err, tol = check(sys.argv[2], sys.argv[3])
        sys.exit(0 if err <= tol else 1)
    ids = make_ids()
    for fam in sys.argv[1:] or ["qwen3", "llama", "gemma4_text", "gemma4"]:
        record(fam, ids)


if __name__ == "__main__":
    main()
