#!/usr/bin/env python3
"""Checks that diffusers loads and samples a DDPMPipeline folder that `ember train-ddpm` wrote.

Usage: /opt/refvenv/bin/python scripts/check_ddpm_folder.py DIR [--seed S] [--steps N]
                                                           [--compare FILE.npy]
Loads DIR with DDPMPipeline.from_pretrained (the UNet's state dict must match its config
exactly: diffusers refuses missing or unexpected tensors), samples one image with
generator=torch.Generator("cpu").manual_seed(S), output_type="np", prints its shape and value
range, and with --compare, the largest difference from the image `ember image --model DIR
--seed S --steps N --out-npy FILE.npy` wrote (the same run in Ember; of a --num-images stack
the first image, which is seed S's). Exits non-zero on a load error, a non-finite image, or a
difference above 1e-3.
"""
import argparse
import sys

import numpy as np
import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--compare")
    a = ap.parse_args()
    from diffusers import DDPMPipeline
    torch.set_num_threads(1)  # a tiny UNet: threads only add overhead
    pipe = DDPMPipeline.from_pretrained(a.dir)
    pipe.set_progress_bar_config(disable=True)
    n = sum(p.numel() for p in pipe.unet.parameters())
    print(f"{a.dir}: {type(pipe).__name__} with {type(pipe.unet).__name__} ({n} parameters), "
          f"{type(pipe.scheduler).__name__} ({pipe.scheduler.config.num_train_timesteps} steps)")
    img = pipe(generator=torch.Generator("cpu").manual_seed(a.seed), num_inference_steps=a.steps,
               output_type="np").images
    print(f"diffusers image: shape {img.shape}, values in [{img.min():.3f}, {img.max():.3f}]")
    if not np.isfinite(img).all():
        sys.exit("the image has non-finite values")
    if a.compare:
        ember = np.load(a.compare)[:1]  # a --num-images stack: its first image is seed S's
        d = float(np.abs(ember.astype(np.float64) - img).max())
        print(f"largest difference from Ember's image {a.compare}: {d:.2e}")
        if d > 1e-3:
            sys.exit("Ember and diffusers differ")


if __name__ == "__main__":
    main()
