#!/usr/bin/env python3
"""diffusers' StableDiffusionXLPipeline (and the refiner's img2img) given prompt_embeds and
pooled_prompt_embeds instead of prompts, on the committed tiny SDXL folders
(tests/fixtures/diffusion/sdxl_tiny from gen_sdxl_fixtures.py, sdxl_refiner_tiny from
gen_sdxl_refiner_fixtures.py; neither rewritten here).

tests/fixtures/diffusion/sdxl_prompt_embeds_ref.{json,bin} (a Bundle), per run (meta "runs":
folder, L, negative prompt, whether negative embeddings are given, guidance, steps, seed,
num_images_per_prompt, strength for the refiner):

  <run>_embeds, <run>_pooled            prompt_embeds [1, L, D], pooled_prompt_embeds [1, P]
  <run>_neg_embeds, <run>_neg_pooled    the negatives, where the run gives them
  <run>_init                            the refiner's init image
  <run>_image                           the pipeline's output_type="np" images

Without negative embeddings under guidance diffusers zeroes them (force_zeros_for_empty_prompt
and no negative prompt) or encodes the negative prompt with every encoder at L tokens. Ember
must match within 1e-3.
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")

# name: (folder, L, D, negative_prompt, neg embeds given, guidance, steps, seed, per, strength)
RUNS = {
    # no negative prompt, force_zeros_for_empty_prompt: zero negatives
    "xl_zero": ("sdxl_tiny", 77, 32, None, False, 5.0, 3, 101, 1, None),
    # a negative prompt: both encoders at L = 20 tokens
    "xl_negative": ("sdxl_tiny", 20, 32, "blurry", False, 4.0, 3, 103, 2, None),
    # the negatives given too
    "xl_given": ("sdxl_tiny", 77, 32, None, True, 5.0, 3, 105, 1, None),
    # the refiner: text_encoder_2 alone encodes "" (force_zeros_for_empty_prompt false)
    "refiner": ("sdxl_refiner_tiny", 77, 16, None, False, 5.0, 6, 107, 1, 0.5),
}


def main():
    import diffusers
    from diffusers import StableDiffusionXLImg2ImgPipeline, StableDiffusionXLPipeline
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    torch.set_num_threads(1)
    b = Bundle(os.path.join(OUT, "sdxl_prompt_embeds_ref"))
    meta = {}
    for name, (folder, length, dim, neg, neg_given, guidance, steps, seed, per,
               strength) in RUNS.items():
        refiner = strength is not None
        cls = StableDiffusionXLImg2ImgPipeline if refiner else StableDiffusionXLPipeline
        pipe = cls.from_pretrained(os.path.join(OUT, folder), add_watermarker=False)
        pipe.set_progress_bar_config(disable=True)
        g = torch.Generator().manual_seed(2000 + seed)
        kw = {"prompt_embeds": torch.randn((1, length, dim), generator=g),
              "pooled_prompt_embeds": torch.randn((1, 8), generator=g)}
        b.add(name + "_embeds", kw["prompt_embeds"])
        b.add(name + "_pooled", kw["pooled_prompt_embeds"])
        if neg_given:
            kw["negative_prompt_embeds"] = torch.randn((1, length, dim), generator=g)
            kw["negative_pooled_prompt_embeds"] = torch.randn((1, 8), generator=g)
            b.add(name + "_neg_embeds", kw["negative_prompt_embeds"])
            b.add(name + "_neg_pooled", kw["negative_pooled_prompt_embeds"])
        if refiner:
            init = np.random.default_rng(seed).random((1, 16, 16, 3), dtype=np.float32)
            kw["image"] = init.copy()
            kw["strength"] = strength
            b.add(name + "_init", torch.from_numpy(init))
        with torch.no_grad():
            image = pipe(negative_prompt=neg, guidance_scale=guidance,
                         num_inference_steps=steps, num_images_per_prompt=per,
                         output_type="np", generator=torch.Generator("cpu").manual_seed(seed),
                         **kw).images
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = {"folder": folder, "negative_prompt": neg, "negative_embeds": neg_given,
                      "guidance": guidance, "steps": steps, "seed": seed,
                      "num_images_per_prompt": per, "strength": strength}
    b.meta = {"runs": meta}
    n, nbytes = b.write()
    print("sdxl_prompt_embeds_ref: %d tensors, %d bytes" % (n, nbytes))


if __name__ == "__main__":
    main()
