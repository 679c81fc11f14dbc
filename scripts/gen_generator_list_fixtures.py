#!/usr/bin/env python3
"""diffusers' pipelines given a list of generators (one per image) on the committed tiny folders
(not rewritten here): randn_tensor draws row i of the initial latents and of every per-step
noise from generator i; image to image encodes the init image once per row, row i's posterior
sample from generator i; inpainting encodes its single image (and the masked image) with
generator 0 only, as StableDiffusionInpaintPipeline._encode_vae_image loops over the image's
rows.

tests/fixtures/diffusion/generator_list_ref.{json,bin} (a Bundle), per run (meta "runs":
folder, pipeline, seeds, steps, scheduler and the run's other arguments):

  <run>_init / <run>_mask   the init image / mask where the run has one (seeded numpy)
  <run>_image               pipe(..., generator=[torch.Generator("cpu").manual_seed(s) for s in
                            seeds], output_type="np").images

Ember must match within 1e-3.
"""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")

RUNS = {
    # two images of one prompt, Euler ancestral: the latents and the per-step noise per row
    "sd_list": dict(folder="sd_tiny", kind="sd", seeds=[5, 7], steps=3, scheduler="euler-a",
                    prompt="a photo of a cat", guidance=7.5, per=2),
    # two prompts, one image each, the folder's PNDM
    "sd_prompts": dict(folder="sd_tiny", kind="sd", seeds=[11, 3], steps=3, scheduler=None,
                       prompt=["a red cube", "a boat"], guidance=5.0, per=1),
    # image to image: row i's posterior sample and noise from generator i
    "img2img_list": dict(folder="sd_tiny", kind="img2img", seeds=[13, 17], steps=5,
                         scheduler="euler-a", prompt="an astronaut", guidance=4.0, per=2,
                         strength=0.6),
    # inpainting: the image's and the masked image's posteriors from generator 0 alone
    "inpaint_list": dict(folder="sd_inpaint_tiny", kind="inpaint", seeds=[19, 23], steps=4,
                         scheduler="euler", prompt="a tree", guidance=5.0, per=2, strength=0.6),
    # an unconditional DDPM batch of three
    "ddpm_list": dict(folder="ddpm_attn", kind="ddpm", seeds=[1, 2, 3], steps=5, scheduler=None),
}


def scheduler(pipe, name):
    from diffusers import EulerAncestralDiscreteScheduler, EulerDiscreteScheduler
    if name:
        cls = {"euler": EulerDiscreteScheduler, "euler-a": EulerAncestralDiscreteScheduler}[name]
        pipe.scheduler = cls.from_config(pipe.scheduler.config)


def main():
    import diffusers
    from diffusers import (DDPMPipeline, StableDiffusionImg2ImgPipeline,
                           StableDiffusionInpaintPipeline, StableDiffusionPipeline)
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    torch.set_num_threads(1)
    b = Bundle(os.path.join(OUT, "generator_list_ref"))
    meta = {}
    for name, r in RUNS.items():
        folder = os.path.join(OUT, r["folder"])
        gens = [torch.Generator("cpu").manual_seed(s) for s in r["seeds"]]
        cls = {"sd": StableDiffusionPipeline, "img2img": StableDiffusionImg2ImgPipeline,
               "inpaint": StableDiffusionInpaintPipeline, "ddpm": DDPMPipeline}[r["kind"]]
        pipe = cls.from_pretrained(folder)
        pipe.set_progress_bar_config(disable=True)
        scheduler(pipe, r["scheduler"])
        kw = {}
        rng = np.random.default_rng(sum(r["seeds"]))
        if r["kind"] in ("img2img", "inpaint"):
            init = rng.random((1, 16, 16, 3), dtype=np.float32)
            kw["image"] = init.copy()
            kw["strength"] = r["strength"]
            b.add(name + "_init", torch.from_numpy(init))
        if r["kind"] == "inpaint":
            mask = rng.random((1, 16, 16, 1), dtype=np.float32)
            kw["mask_image"] = mask.copy()
            b.add(name + "_mask", torch.from_numpy(mask))
        with torch.no_grad():
            if r["kind"] == "ddpm":
                image = pipe(batch_size=len(gens), generator=gens,
                             num_inference_steps=r["steps"], output_type="np").images
            else:
                image = pipe(r["prompt"], guidance_scale=r["guidance"],
                             num_inference_steps=r["steps"], num_images_per_prompt=r["per"],
                             generator=gens, output_type="np", **kw).images
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = r
    b.meta = {"runs": meta}
    n, nbytes = b.write()
    print("generator_list_ref: %d tensors, %d bytes" % (n, nbytes))


if __name__ == "__main__":
    main()
