#!/usr/bin/env python3
"""diffusers' StableDiffusionPipeline given prompt_embeds (and negative_prompt_embeds) instead of
prompts, on the tiny Stable Diffusion folder (tests/fixtures/diffusion/sd_tiny, written by
gen_sd_fixtures.py; not rewritten here).

tests/fixtures/diffusion/sd_prompt_embeds_ref.{json,bin} (a Bundle), per run (meta "runs":
negative prompt, guidance, steps, seed, num_images_per_prompt, whether negative embeddings are
given):

  <run>_embeds      prompt_embeds, f32 [n, L, 16] (seeded torch.randn)
  <run>_neg_embeds  negative_prompt_embeds of the same shape, where the run gives them
  <run>_image       pipe(prompt_embeds=..., negative_prompt_embeds=... | negative_prompt=...,
                    generator=torch.Generator("cpu").manual_seed(seed), output_type="np").images

Without negative embeddings under guidance the pipeline encodes the negative prompt ("" for
None), tokenized to the prompt embeddings' length L. Ember must match within 1e-3.
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")
SD = os.path.join(OUT, "sd_tiny")

# name: (n, L, negative_prompt, negative embeddings given, guidance, steps, seed, per)
RUNS = {
    # under guidance the uncond embeddings of "" are encoded
    "embeds": (1, 77, None, False, 7.5, 3, 81, 1),
    # both given, two prompts' worth, two images each
    "embeds_neg": (2, 77, None, True, 5.0, 3, 83, 2),
    # a short L: the negative prompt is tokenized to 10 tokens
    "embeds_short": (1, 10, "blurry, dark", False, 4.0, 3, 85, 1),
    # no guidance: the prompt embeddings alone
    "embeds_nocfg": (1, 77, None, False, 1.0, 3, 87, 1),
}


def main():
    import diffusers
    from diffusers import StableDiffusionPipeline
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    torch.set_num_threads(1)
    pipe = StableDiffusionPipeline.from_pretrained(SD)
    pipe.set_progress_bar_config(disable=True)
    b = Bundle(os.path.join(OUT, "sd_prompt_embeds_ref"))
    meta = {}
    for name, (n, length, neg, neg_given, guidance, steps, seed, per) in RUNS.items():
        g = torch.Generator().manual_seed(1000 + seed)
        embeds = torch.randn((n, length, 16), generator=g)
        kw = {}
        if neg_given:
            kw["negative_prompt_embeds"] = torch.randn((n, length, 16), generator=g)
            b.add(name + "_neg_embeds", kw["negative_prompt_embeds"])
        with torch.no_grad():
            image = pipe(prompt_embeds=embeds, negative_prompt=neg, guidance_scale=guidance,
                         num_inference_steps=steps, num_images_per_prompt=per,
                         output_type="np", generator=torch.Generator("cpu").manual_seed(seed),
                         **kw).images
        b.add(name + "_embeds", embeds)
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = {"negative_prompt": neg, "negative_embeds": neg_given,
                      "guidance": guidance, "steps": steps, "seed": seed,
                      "num_images_per_prompt": per}
    b.meta = {"runs": meta}
    nt, nbytes = b.write()
    print("sd_prompt_embeds_ref: %d tensors, %d bytes" % (nt, nbytes))
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
