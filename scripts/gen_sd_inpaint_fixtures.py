#!/usr/bin/env python3
"""diffusers' StableDiffusionInpaintPipeline: a tiny inpainting folder, and the tiny Stable
Diffusion folder run as an inpainting pipeline.

tests/fixtures/diffusion/sd_inpaint_tiny/ is what StableDiffusionInpaintPipeline.save_pretrained
writes for sd_tiny's tokenizer, text encoder, VAE and PNDM scheduler (loaded from
tests/fixtures/diffusion/sd_tiny, written by gen_sd_fixtures.py) with a UNet of 9 input channels
(the latents, the mask, the masked image's latents), as stable-diffusion-inpainting is laid out.
sd_tiny itself (a 4-channel UNet) loaded as StableDiffusionInpaintPipeline runs the legacy
blend: after each step the known region is put back from the init image's latents, noised to
the next timestep.

Draws from torch.Generator("cpu").manual_seed(seed), in order: the init image's VAE posterior
sample (a 4-channel UNet, or strength < 1), the initial noise, then the masked image's posterior
sample, then any per-step noise.

tests/fixtures/diffusion/sd_inpaint_ref.{json,bin} (a Bundle), per run (meta "runs": folder,
prompt, negative prompt, guidance, steps, strength (null: the default 1.0), seed, scheduler
(null: the folder's), num_images_per_prompt):

  <run>_init   the init image, f32 [1, 16, 16, 3] in [0, 1] (seeded numpy)
  <run>_mask   the mask, f32 [1, 16, 16, 1] in [0, 1] (seeded; binarised at 0.5 by the pipeline,
               white repainted)
  <run>_image  pipe(prompt, image=<run>_init, mask_image=<run>_mask, ...,
               output_type="np").images: f32 [N, 16, 16, 3]

tests/fixtures/diffusion/sd_inpaint_mask.png: a seeded 16 x 16 RGB PNG given to the pipeline as
a PIL image (the run "png_mask": the mask processor turns it grey with PIL's convert("L")); its
_mask is the RGB image as read, f32 [1, 16, 16, 3] of k / 255.

And StableDiffusionXLInpaintPipeline on tests/fixtures/diffusion/sdxl_tiny (gen_sdxl_fixtures.py;
a 4-channel UNet: the blend; not rewritten here), meta "xl_runs", the same tensors per run: its
default strength 0.9999 skips the schedule's first step and noises the image's latents, and the
time ids are SDXL base's six.

Ember must match within 1e-3.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402
from gen_diffusion_fixtures import randomise  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")
SD = os.path.join(OUT, "sd_tiny")
INPAINT = os.path.join(OUT, "sd_inpaint_tiny")

# name: (folder, prompt, negative_prompt, guidance, steps, strength, seed, scheduler, per);
# strength None: the pipeline's default, scheduler None: the folder's
RUNS = {
    # the inpainting UNet: pure noise at the default strength 1.0, PNDM, guidance 7.5
    "inpaint": ("sd_inpaint_tiny", "a photo of a cat", None, 7.5, 4, None, 61, None, 1),
    # strength < 1: the init image's latents noised; a negative prompt; Euler
    "inpaint_strength": ("sd_inpaint_tiny", "a red cube", "blurry", 3.0, 6, 0.6, 63, "euler", 1),
    # no guidance, two images per prompt, Euler ancestral's per-step noise after the draws
    "inpaint_batch": ("sd_inpaint_tiny", "an astronaut", None, 1.0, 3, None, 65, "euler-a", 2),
    # a 4-channel UNet: the known region blended back after every step
    "blend": ("sd_tiny", "a photo of a cat", None, 7.5, 4, None, 67, None, 1),
    "blend_strength": ("sd_tiny", "a boat", "dark", 4.0, 5, 0.6, 69, "euler", 2),
    # the mask as an RGB PNG (greyed by PIL)
    "png_mask": ("sd_inpaint_tiny", "a tree", None, 5.0, 3, None, 71, None, 1),
    # StableDiffusionXLInpaintPipeline on sdxl_tiny (meta "xl_runs"; strength None: 0.9999)
    "xl_inpaint": ("sdxl_tiny", "a photo of a cat", None, 5.0, 5, None, 73, None, 1),
    "xl_inpaint_full": ("sdxl_tiny", "a red cube", "blurry", 4.0, 4, 1.0, 75, None, 2),
}
XL = "sdxl_tiny"
PNG = os.path.join(OUT, "sd_inpaint_mask.png")


def build():
    from diffusers import StableDiffusionInpaintPipeline, StableDiffusionPipeline
    from diffusers import UNet2DConditionModel
    base = StableDiffusionPipeline.from_pretrained(SD)
    cfg = dict(base.unet.config)
    cfg["in_channels"] = 9
    unet = UNet2DConditionModel.from_config(cfg).eval()
    randomise(unet, 640)
    pipe = StableDiffusionInpaintPipeline(
        vae=base.vae, text_encoder=base.text_encoder, tokenizer=base.tokenizer, unet=unet,
        scheduler=base.scheduler, safety_checker=None, feature_extractor=None,
        requires_safety_checker=False)
    shutil.rmtree(INPAINT, ignore_errors=True)
    pipe.save_pretrained(INPAINT)


def scheduler(pipe, name):
    from diffusers import EulerAncestralDiscreteScheduler, EulerDiscreteScheduler
    cls = {"euler": EulerDiscreteScheduler, "euler-a": EulerAncestralDiscreteScheduler}[name]
    pipe.scheduler = cls.from_config(pipe.scheduler.config)


def pipeline(folder, sched):
    from diffusers import StableDiffusionInpaintPipeline, StableDiffusionXLInpaintPipeline
    path = os.path.join(OUT, folder)
    if folder == XL:
        pipe = StableDiffusionXLInpaintPipeline.from_pretrained(path, add_watermarker=False)
    else:
        pipe = StableDiffusionInpaintPipeline.from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    if sched:
        scheduler(pipe, sched)
    return pipe


def main():
    import diffusers
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    torch.set_num_threads(1)
    build()
    b = Bundle(os.path.join(OUT, "sd_inpaint_ref"))
    meta, xl_meta = {}, {}
    for name, (folder, prompt, neg, guidance, steps, strength, seed, sched,
               per) in RUNS.items():
        pipe = pipeline(folder, sched)
        rng = np.random.default_rng(seed)
        init = rng.random((1, 16, 16, 3), dtype=np.float32)
        mask = rng.random((1, 16, 16, 1), dtype=np.float32)
        given = mask.copy()
        if name == "png_mask":
            from PIL import Image
            rgb = (rng.random((16, 16, 3)) * 255).round().astype(np.uint8)
            Image.fromarray(rgb, "RGB").save(PNG)
            given = Image.open(PNG)
            mask = (np.asarray(given, dtype=np.float32) / 255.0)[None]
        kw = {} if strength is None else {"strength": strength}
        with torch.no_grad():
            image = pipe(prompt, image=init.copy(), mask_image=given, negative_prompt=neg,
                         guidance_scale=guidance, num_inference_steps=steps, height=16, width=16,
                         num_images_per_prompt=per, output_type="np",
                         generator=torch.Generator("cpu").manual_seed(seed), **kw).images
        b.add(name + "_init", torch.from_numpy(init))
        b.add(name + "_mask", torch.from_numpy(mask))
        b.add(name + "_image", torch.from_numpy(image))
        m = {"folder": folder, "prompt": prompt, "negative_prompt": neg, "guidance": guidance,
             "steps": steps, "strength": strength, "seed": seed, "scheduler": sched,
             "num_images_per_prompt": per}
        if folder == XL:  # the XL runs' meta names neither (the folder and its scheduler)
            del m["folder"], m["scheduler"]
        (xl_meta if folder == XL else meta)[name] = m
    b.meta = {"runs": meta, "xl_runs": xl_meta}
    n, nbytes = b.write()
    print("sd_inpaint_ref: %d tensors, %d bytes" % (n, nbytes))
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
