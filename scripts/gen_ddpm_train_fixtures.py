#!/usr/bin/env python3
"""Two DDPM training steps of a tiny UNet2DModel, from diffusers and torch, for
tests/test_ddpm_train.c.

Usage: /opt/refvenv/bin/python scripts/gen_ddpm_train_fixtures.py
Needs the pinned versions of scripts/requirements-fixtures.txt and the tiny DDPMPipeline that
scripts/gen_diffusion_fixtures.py committed under tests/fixtures/diffusion/ddpm_attn (loaded back
with from_pretrained, not regenerated).

The step is diffusers' examples/unconditional_image_generation/train_unconditional.py step:
noisy = scheduler.add_noise(x0, noise, t); loss = F.mse_loss(unet(noisy, t).sample, noise);
loss.backward(); AdamW step; zero_grad — in float32, as Ember trains.

tests/fixtures/diffusion/ddpm_train_ref.{json,bin} (a Bundle) holds
  step<k>/x0, step<k>/noise, step<k>/t   the inputs of step k (k = 0, 1)
  step<k>/loss                          the loss of step k (before its update)
  after/<param>                         a few parameters after both steps (meta.params)
  ema/<param>                           diffusers' EMAModel of the parameters after both steps
                                        (train_unconditional.py's --use_ema defaults: warmup,
                                        inv_gamma 1, power 3/4, max decay 0.9999)
  delta_norm                            ||p_after - p_before|| of every parameter, in
                                        named_parameters() order (meta.names)
"""
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

DIFF = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")
LR, WD, BETAS, EPS = 1e-3, 1e-2, (0.9, 0.999), 1e-8
PARAMS = ["conv_in.weight", "time_embedding.linear_1.bias",
          "down_blocks.0.resnets.0.norm1.weight", "down_blocks.1.attentions.0.to_k.weight",
          "mid_block.attentions.0.group_norm.bias", "up_blocks.0.upsamplers.0.conv.bias",
          "conv_out.weight", "conv_out.bias"]
EMA = {"max_decay": 0.9999, "inv_gamma": 1.0, "power": 0.75}


def main():
    from diffusers import DDPMScheduler, UNet2DModel
    from diffusers.training_utils import EMAModel
    folder = os.path.join(DIFF, "ddpm_attn")
    unet = UNet2DModel.from_pretrained(os.path.join(folder, "unet")).train()
    sched = DDPMScheduler.from_pretrained(os.path.join(folder, "scheduler"))
    opt = torch.optim.AdamW(unet.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    before = {k: v.detach().clone() for k, v in unet.named_parameters()}
    # train_unconditional.py's --use_ema with its defaults
    ema = EMAModel(unet.parameters(), decay=EMA["max_decay"], use_ema_warmup=True,
                   inv_gamma=EMA["inv_gamma"], power=EMA["power"])
    b = Bundle(os.path.join(DIFF, "ddpm_train_ref"))
    g = torch.Generator().manual_seed(11)
    size, ch = unet.config.sample_size, unet.config.in_channels
    for k, ts in enumerate(([3, 870], [499, 0])):
        x0 = torch.rand((2, ch, size, size), generator=g) * 2 - 1
        noise = torch.randn(x0.shape, generator=g)
        t = torch.tensor(ts, dtype=torch.int64)
        noisy = sched.add_noise(x0, noise, t)
        loss = F.mse_loss(unet(noisy, t).sample, noise)
        loss.backward()
        opt.step()
        opt.zero_grad()
        ema.step(unet.parameters())
        b.add(f"step{k}/x0", x0)
        b.add(f"step{k}/noise", noise)
        b.add(f"step{k}/t", t)
        b.add(f"step{k}/loss", loss.detach().reshape(()))
    params = dict(unet.named_parameters())
    for p in PARAMS:
        b.add(f"after/{p}", params[p].detach())
    names = list(params)
    b.add("delta_norm", torch.stack([(params[n].detach() - before[n]).norm() for n in names]))
    shadow = dict(zip(names, ema.shadow_params))
    for p in PARAMS:
        b.add(f"ema/{p}", shadow[p].detach())
    b.meta = {"params": PARAMS, "names": names, "ema": EMA, "ema_decay": ema.cur_decay_value,
              "adamw": {"lr": LR, "weight_decay": WD, "betas": BETAS, "eps": EPS}}
    n, nbytes = b.write()
    print(f"ddpm_train_ref: {n} tensors, {nbytes} bytes")


if __name__ == "__main__":
    main()
