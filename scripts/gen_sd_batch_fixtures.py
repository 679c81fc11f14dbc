#!/usr/bin/env python3
"""diffusers' Stable Diffusion pipelines with batches, on the tiny Stable Diffusion folder.

Loads tests/fixtures/diffusion/sd_tiny/ (written by gen_sd_fixtures.py; not rewritten here) and
runs StableDiffusionPipeline (and StableDiffusionImg2ImgPipeline) with num_images_per_prompt > 1
and a list of prompts, each from one torch.Generator("cpu").manual_seed(seed): the pipeline draws
the initial latents of all B = len(prompts) * num_images_per_prompt images as one randn of shape
[B, 4, h, w], denoises them together (the UNet sees 2B rows under classifier-free guidance:
[negative embeddings, each repeated num_images_per_prompt times; prompt embeddings likewise]),
draws any per-step noise (DDPM, Euler ancestral) over the whole batch, and decodes the batch.
Images are 8 x 8 (latents 4 x 4) to keep the fixture small.

Each run is also made with pipe.vae.enable_slicing() (the batch decoded one image at a time),
and the script checks that diffusers' sliced image equals the unsliced one (they are the same
computation per image), so the one reference serves both.

tests/fixtures/diffusion/sd_batch_ref.{json,bin} (a Bundle), per run (meta "runs" lists the
pipeline, scheduler, prompt(s), negative prompt(s), guidance, steps, seed, num_images_per_prompt,
strength):

  <run>_latents  the run's initial latents [B, 4, 4, 4] (text to image runs only)
  <run>_init     the init image f32 [1, 8, 8, 3] in [0, 1] (image to image runs only)
  <run>_image    pipe(..., output_type="np").images: f32 [B, 8, 8, 3]

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
SD = os.path.join(OUT, "sd_tiny")
SIZE = 8

# name: (img2img, scheduler class or None for the folder's PNDM, prompt (a str or a list),
#        negative (None, a str or a list), guidance, steps, seed, num_images_per_prompt,
#        strength)
RUNS = {
    "cfg2": (False, None, "a photo of a cat", None, 7.5, 3, 3, 2, None),
    "ddpm3": (False, "DDPMScheduler", "a red cube", "blurry", 3.0, 3, 9, 3, None),
    "nocfg2": (False, None, "an astronaut", None, 1.0, 2, 4, 2, None),
    "prompts": (False, None, ["a cat", "a dog in the snow"], ["blurry", ""], 4.0, 2, 6, 2, None),
    "img2img2": (True, "EulerAncestralDiscreteScheduler", "a dog", None, 5.0, 4, 17, 2, 0.75),
}


def main():
    import diffusers
    from diffusers import StableDiffusionImg2ImgPipeline, StableDiffusionPipeline
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    torch.set_num_threads(1)
    t2i = StableDiffusionPipeline.from_pretrained(SD, safety_checker=None,
                                                  requires_safety_checker=False)
    i2i = StableDiffusionImg2ImgPipeline(**t2i.components)
    folder_scheduler = t2i.scheduler
    b = Bundle(os.path.join(OUT, "sd_batch_ref"))
    meta = {}
    for name, (img2img, cls, prompt, neg, guidance, steps, seed, n, strength) in RUNS.items():
        pipe = i2i if img2img else t2i
        pipe.set_progress_bar_config(disable=True)
        pipe.scheduler = (getattr(diffusers, cls).from_config(folder_scheduler.config) if cls
                          else folder_scheduler)
        kw = dict(negative_prompt=neg, guidance_scale=guidance, num_inference_steps=steps,
                  num_images_per_prompt=n, output_type="np")
        if img2img:
            init = np.random.default_rng(seed).random((1, SIZE, SIZE, 3), dtype=np.float32)
            kw.update(image=init.copy(), strength=strength)
        else:
            kw.update(height=SIZE, width=SIZE)
        images = []
        for slicing in (False, True):
            if slicing:
                pipe.vae.enable_slicing()
            else:
                pipe.vae.disable_slicing()
            with torch.no_grad():
                images.append(pipe(prompt, generator=torch.Generator("cpu").manual_seed(seed),
                                   **kw).images)
        pipe.vae.disable_slicing()
        image = images[0]
        rows = (len(prompt) if isinstance(prompt, list) else 1) * n
        assert image.shape == (rows, SIZE, SIZE, 3), image.shape
        gap = float(np.abs(images[1] - image).max())
        assert gap < 1e-5, (name, gap)
        if img2img:
            b.add(name + "_init", torch.from_numpy(init))
        else:
            latents = torch.randn((rows, 4, SIZE // 2, SIZE // 2),
                                  generator=torch.Generator("cpu").manual_seed(seed))
            b.add(name + "_latents", latents)
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = {"img2img": img2img, "scheduler": type(pipe.scheduler).__name__,
                      "prompt": prompt, "negative_prompt": neg, "guidance": guidance,
                      "steps": steps, "seed": seed, "num_images_per_prompt": n,
                      "strength": strength, "sliced_vs_unsliced": gap}
    b.meta = {"runs": meta}
    count, nbytes = b.write()
    print("sd_batch_ref: %d tensors, %d bytes" % (count, nbytes))
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
