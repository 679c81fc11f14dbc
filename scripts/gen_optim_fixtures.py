#!/usr/bin/env python3
"""Generates tests/fixtures/optim/train10.{json,bin}: 10 training steps of a small linear model
with torch's optimizers, clip_grad_norm_ and transformers' cosine schedule, in float32.

Usage: python scripts/gen_optim_fixtures.py
Needs the pinned versions of scripts/requirements-fixtures.txt.

The model is y = X W^T + b with loss mean((y - Y)^2). Each run records, per step, the loss
before the update, the gradient norm clip_grad_norm_ returned (before clipping; absent when
the run does not clip) and the learning rate the update used, and the parameters at the end.
"""
import os
import sys

import torch
from transformers import get_cosine_schedule_with_warmup

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from fixtures.common import Bundle, gen, randn  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "optim", "train10")
STEPS = 10


def train(b, name, W0, b0, X, Y, make_opt, warmup=None, clip=None):
    W = W0.clone().requires_grad_(True)
    bias = b0.clone().requires_grad_(True)
    opt = make_opt([W, bias])
    sched = get_cosine_schedule_with_warmup(opt, warmup, STEPS) if warmup is not None else None
    losses, norms, lrs = [], [], []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = ((torch.nn.functional.linear(X, W, bias) - Y) ** 2).mean()
        loss.backward()
        if clip is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_([W, bias], clip)))
        lrs.append(opt.param_groups[0]["lr"])
        losses.append(float(loss.detach()))
        opt.step()
        if sched is not None:
            sched.step()
    b.add(f"{name}/losses", torch.tensor(losses, dtype=torch.float64))
    b.add(f"{name}/lrs", torch.tensor(lrs, dtype=torch.float64))
    if norms:
        b.add(f"{name}/norms", torch.tensor(norms, dtype=torch.float64))
    b.add(f"{name}/W", W.detach())
    b.add(f"{name}/b", bias.detach())


def main():
    g = gen(10)
    W0, b0 = randn(g, 4, 3), randn(g, 4)
    X, Y = randn(g, 8, 3), randn(g, 8, 4) * 2
    b = Bundle(OUT)
    for k, v in [("W0", W0), ("b0", b0), ("X", X), ("Y", Y)]:
        b.add(k, v)
    # AdamW with torch's defaults but lr, warmup 3 of 10 then cosine, clipping at 0.5
    train(b, "adamw", W0, b0, X, Y, lambda p: torch.optim.AdamW(p, lr=0.05), warmup=3, clip=0.5)
    # AdamW with every default (lr 1e-3), constant rate, no clipping
    train(b, "adamw_defaults", W0, b0, X, Y, lambda p: torch.optim.AdamW(p))
    train(b, "sgd_nesterov", W0, b0, X, Y,
          lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
          clip=1.0)
    train(b, "sgd_dampening", W0, b0, X, Y,
          lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, dampening=0.3), warmup=2)
    b.meta = {"steps": STEPS, "adamw_warmup": 3, "sgd_dampening_warmup": 2}
    n, size = b.write()
    print(f"optim: {n} tensors, {size} bytes")


if __name__ == "__main__":
    main()
