#!/usr/bin/env python3
"""Gradients through a whole UNet2DModel forward, from torch.autograd, for tests/test_unet_grad.c.

Usage: python scripts/gen_unet_grad_fixtures.py
Needs the pinned versions of scripts/requirements-fixtures.txt and the tiny models that
scripts/gen_diffusion_fixtures.py committed under tests/fixtures/diffusion/ (loaded back with
from_pretrained, not regenerated).

For each model <m>, tests/fixtures/diffusion/unet_grad_ref.{json,bin} (a Bundle) holds
  <m>/sample, <m>/t, <m>/class_labels (when the model has a class embedding)  the forward's inputs
  <m>/grad_out        the upstream gradient of the output (what em_backward_grad is given)
  <m>/grad/sample     d sum(out * grad_out) / d sample
  <m>/grad/<param>    the same for a few parameters (diffusers' names; meta.params lists them
                      per model): one of each kind the backward rules must reach
The reference runs in float64 from the f32 weights and inputs, rounded to f32.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

DIFF = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")

# model folder, timestep, class labels
MODELS = {
    "ddpm_attn": ("ddpm_attn/unet", 500, None),
    "ddpm_scale_shift": ("ddpm_scale_shift/unet", 999, None),
    "ddim_three": ("ddim_three/unet", 10, None),
    "unet_class": ("unet_class", 500, [1, 4]),
    "unet_fourier": ("unet_fourier", 0.5, [0.3, 7.0]),
}

# the parameters checked, where the model has them
PARAMS = ["conv_in.weight", "conv_in.bias", "time_embedding.linear_1.weight",
          "down_blocks.0.resnets.0.norm1.weight", "down_blocks.0.resnets.0.norm1.bias",
          "down_blocks.0.resnets.0.conv1.weight", "down_blocks.0.downsamplers.0.conv.weight",
          "mid_block.attentions.0.to_q.weight", "mid_block.attentions.0.group_norm.weight",
          "up_blocks.0.upsamplers.0.conv.weight", "up_blocks.0.resnets.0.conv_shortcut.weight",
          "conv_norm_out.weight", "conv_norm_out.bias", "conv_out.weight", "conv_out.bias"]


def main():
    from diffusers import UNet2DModel
    b = Bundle(os.path.join(DIFF, "unet_grad_ref"))
    b.meta = {"params": {}}
    g = torch.Generator().manual_seed(7)
    for name, (folder, t, labels) in MODELS.items():
        unet = UNet2DModel.from_pretrained(os.path.join(DIFF, folder)).eval().to(torch.float64)
        cfg = unet.config
        size = cfg.sample_size
        sample = torch.randn((2, cfg.in_channels, size, size), generator=g)
        tt = torch.tensor(t, dtype=torch.float32 if isinstance(t, float) else torch.int64)
        b.add(f"{name}/sample", sample)
        b.add(f"{name}/t", tt)
        cl = None
        if labels is not None:
            cl = torch.tensor(labels, dtype=torch.float32 if isinstance(labels[0], float)
                              else torch.int64)
            b.add(f"{name}/class_labels", cl)
            if cl.is_floating_point():
                cl = cl.to(torch.float64)
        x = sample.to(torch.float64).requires_grad_(True)
        params = dict(unet.named_parameters())
        names = [p for p in PARAMS if p in params]
        out = unet(x, tt.to(torch.float64) if tt.is_floating_point() else tt,
                   class_labels=cl).sample
        gout = torch.randn(out.shape, generator=g)
        out.backward(gout.to(torch.float64))
        b.add(f"{name}/grad_out", gout)
        b.add(f"{name}/grad/sample", x.grad.to(torch.float32))
        for p in names:
            b.add(f"{name}/grad/{p}", params[p].grad.to(torch.float32))
        b.meta["params"][name] = names
    n, nbytes = b.write()
    print(f"unet_grad_ref: {n} tensors, {nbytes} bytes")


if __name__ == "__main__":
    main()
