#!/usr/bin/env python3
"""Records torch's bf16 mixed-precision training of the tiny checkpoints, to compare with
`ember train --dtype bf16` (tests/check_train_bf16.py).

Usage: python scripts/gen_train_bf16_fixtures.py [family ...]        (default: qwen3 llama)
Needs the pinned versions of scripts/requirements-fixtures.txt.

The run is scripts/gen_train_run_fixtures.py's (its hyper-parameters, tests/fixtures/train/ids.npy,
windows (s*B + b) mod K, AdamW, cosine schedule with warmup, clip_grad_norm_), in three precisions:
  f32       everything float32 (the f32 fixture's run, recorded again as the reference spread)
  autocast  float32 parameters, forward and loss under torch.autocast("cpu", dtype=bfloat16)
            (torch's usual mixed precision: matmuls in bf16, norms/softmax/loss as autocast
            decides, gradients reach the f32 parameters)
  master    Ember's design: the model's parameters are bf16 (the checkpoint rounded to bf16 at
            load), every activation bf16 (transformers' own upcasts: RMSNorm and the attention
            softmax in f32, the loss on logits.float()); an f32 master copy of each parameter
            (made from the rounded bf16 weight) is what AdamW updates (f32 moments); each step
            the bf16 gradients are cast to f32 for the masters, clipped there, the masters
            updated and rounded (round to nearest even) back into the bf16 parameters.
Writes tests/fixtures/train/<family>_bf16.json: {"meta": hyper-parameters, "<variant>":
{"losses": [...], "grad_norms": [...]}} (the loss before each update, clip_grad_norm_'s norm).
"""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen_train_run_fixtures import HP, MODELS, OUT  # noqa: E402


def run(family, ids, variant):
    from transformers import AutoModelForCausalLM, get_cosine_schedule_with_warmup
    torch.manual_seed(0)
    dtype = torch.bfloat16 if variant == "master" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, family), dtype=dtype)
    model.train()
    T, B, N = HP["seq_len"], HP["batch"], HP["steps"]
    windows = torch.from_numpy(ids[: len(ids) // T * T].reshape(-1, T))
    K = windows.shape[0]
    params = list(model.parameters())  # tied weights appear once
    if variant == "master":
        masters = [p.detach().float().clone().requires_grad_(True) for p in params]
    else:
        masters = params
    opt = torch.optim.AdamW(masters, lr=HP["lr"], betas=(HP["beta1"], HP["beta2"]),
                            eps=HP["eps"], weight_decay=HP["weight_decay"])
    sched = get_cosine_schedule_with_warmup(opt, HP["warmup"], N)
    losses, norms = [], []
    for s in range(N):
        x = windows[[(s * B + b) % K for b in range(B)]]
        if variant == "autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss
        else:
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        if variant == "master":
            for p, m in zip(params, masters):
                m.grad = p.grad.float()
                p.grad = None
        norm = torch.nn.utils.clip_grad_norm_(masters, HP["grad_clip"])
        opt.step()
        sched.step()
        opt.zero_grad()
        if variant == "master":
            with torch.no_grad():
                for p, m in zip(params, masters):
                    p.copy_(m)  # f32 -> bf16, round to nearest even
        losses.append(float(loss.float().item()))
        norms.append(float(norm.item()))
    return {"losses": losses, "grad_norms": norms}


def main():
    ids = np.load(os.path.join(OUT, "ids.npy"))
    for fam in sys.argv[1:] or ["qwen3", "llama"]:
        res = {"meta": dict(HP, family=fam, torch=torch.__version__)}
        for v in ("f32", "autocast", "master"):
            res[v] = run(fam, ids, v)
        with open(os.path.join(OUT, fam + "_bf16.json"), "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
        f32 = res["f32"]["losses"]
        for v in ("autocast", "master"):
            d = max(abs(a - b) for a, b in zip(res[v]["losses"], f32))
            print(f"{fam} {v}: losses {res[v]['losses'][0]:.5f} -> {res[v]['losses'][-1]:.5f}, "
                  f"max |loss - f32| {d:.3g}")
        d = max(abs(a - b) for a, b in zip(res["autocast"]["losses"], res["master"]["losses"]))
        print(f"{fam}: max |autocast - master| {d:.3g}")


if __name__ == "__main__":
    main()
