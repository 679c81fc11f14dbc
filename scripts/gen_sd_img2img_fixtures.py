#!/usr/bin/env python3
"""diffusers' StableDiffusionImg2ImgPipeline on the tiny Stable Diffusion folder.

Loads tests/fixtures/diffusion/sd_tiny/ (written by gen_sd_fixtures.py; not rewritten here) as
StableDiffusionImg2ImgPipeline and runs it on a seeded random init image with several
schedulers and strengths. The pipeline draws, from torch.Generator("cpu").manual_seed(seed):
the VAE posterior's sample (mean + std * randn), then the noise that scheduler.add_noise mixes
in at the first kept timestep, then any per-step noise (Euler ancestral).

tests/fixtures/diffusion/sd_img2img_ref.{json,bin} (a Bundle), per run (meta "runs" lists the
prompt, negative prompt, guidance, steps, strength, seed and scheduler class):

  <run>_init   the init image, f32 [1, 16, 16, 3] in [0, 1] (output_type="np" layout)
  <run>_image  pipe(prompt, image=<run>_init, ..., output_type="np").images: f32 [1, 16, 16, 3]

tests/fixtures/diffusion/sd_img2img_init.png: a seeded 16 x 16 RGB PNG, passed to the pipeline
as a PIL image (the run "png"; its _init is the image as the pipeline's processor reads it).

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

# name: (scheduler class or None for the folder's PNDM, prompt, negative, guidance, steps,
#        strength, seed)
RUNS = {
    "pndm": (None, "a photo of a cat", None, 7.5, 5, 0.6, 3),
    "ddim": ("DDIMScheduler", "a red cube", "blurry", 4.0, 4, 0.75, 7),
    "euler": ("EulerDiscreteScheduler", "an astronaut", None, 1.0, 6, 0.5, 13),
    "euler_a": ("EulerAncestralDiscreteScheduler", "a dog", "", 5.0, 4, 0.7, 17),
    "dpm": ("DPMSolverMultistepScheduler", "a tree by a lake", None, 7.5, 5, 0.8, 19),
    "full": ("DDPMScheduler", "a house", None, 3.0, 3, 1.0, 23),
    "png": ("EulerDiscreteScheduler", "a boat", None, 7.5, 4, 0.75, 29),
}
PNG = os.path.join(OUT, "sd_img2img_init.png")


def main():
    import diffusers
    from diffusers import StableDiffusionImg2ImgPipeline
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    torch.set_num_threads(1)
    pipe = StableDiffusionImg2ImgPipeline.from_pretrained(SD, safety_checker=None,
                                                          requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    folder_scheduler = pipe.scheduler
    b = Bundle(os.path.join(OUT, "sd_img2img_ref"))
    meta = {}
    for name, (cls, prompt, neg, guidance, steps, strength, seed) in RUNS.items():
        pipe.scheduler = (getattr(diffusers, cls).from_config(folder_scheduler.config) if cls
                          else folder_scheduler)
        init = np.random.default_rng(seed).random((1, 16, 16, 3), dtype=np.float32)
        given = init.copy()
        if name == "png":
            from PIL import Image
            Image.fromarray((init[0] * 255).round().astype(np.uint8), "RGB").save(PNG)
            given = Image.open(PNG)
            init = np.array(given.convert("RGB")).astype(np.float32)[None] / 255.0
        with torch.no_grad():
            image = pipe(prompt, image=given, negative_prompt=neg, strength=strength,
                         guidance_scale=guidance, num_inference_steps=steps, output_type="np",
                         generator=torch.Generator("cpu").manual_seed(seed)).images
        b.add(name + "_init", torch.from_numpy(init))
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = {"scheduler": type(pipe.scheduler).__name__, "prompt": prompt,
                      "negative_prompt": neg, "guidance": guidance, "steps": steps,
                      "strength": strength, "seed": seed}
    b.meta = {"runs": meta}
    n, nbytes = b.write()
    print("sd_img2img_ref: %d tensors, %d bytes" % (n, nbytes))
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
