#!/usr/bin/env python3
"""A tiny random SDXL refiner folder and diffusers' images from it.

tests/fixtures/diffusion/sdxl_refiner_tiny/ is what StableDiffusionXLImg2ImgPipeline.save_pretrained
writes for a refiner-layout pipeline, as stabilityai/stable-diffusion-xl-refiner-1.0 is laid out:
no tokenizer and no text_encoder (both [null, null] in model_index.json), tokenizer_2 (clip/tok_sd2)
and text_encoder_2 (a CLIPTextModelWithProjection, hidden 16, projection_dim 8),
requires_aesthetics_score true, force_zeros_for_empty_prompt false; a UNet2DConditionModel with
addition_embed_type "text_time" fed 5 time ids (original size, crop corner, aesthetic score):
projection_class_embeddings_input_dim 8 + 5 * 4 = 28, cross_attention_dim 16 (text_encoder_2's
states alone); the base fixture's AutoencoderKL layout and SDXL's EulerDiscreteScheduler config.

tests/fixtures/diffusion/sdxl_refiner_tiny_ref.{json,bin} (a Bundle), per run (meta "runs":
prompt, prompt_2, negative_prompt, guidance, steps, strength (null: the default 0.3), seed,
aesthetic_score / negative_aesthetic_score (null: the defaults 6.0 / 2.5), num_images_per_prompt,
height, width):

  <run>_init     the init image, f32 [1, H, W, 3] in [0, 1] (seeded numpy)
  <run>_image    pipe(prompt, image=<run>_init, ..., generator=torch.Generator("cpu")
                 .manual_seed(seed), output_type="np").images

and the hand-over of diffusers' "ensemble of expert denoisers" (meta "handover"): the base
folder tests/fixtures/diffusion/sdxl_tiny (StableDiffusionXLPipeline) run to denoising_end with
output_type="latent", then this refiner from those latents with denoising_start:

  handover_latents  base(prompt, num_inference_steps=steps, denoising_end=split, seed base_seed,
                    output_type="latent").images: f32 [1, 4, 8, 8]
  handover_image    refiner(prompt, image=handover_latents, num_inference_steps=steps,
                    denoising_start=split, seed refiner_seed).images
  latents_image     refiner(prompt, image=handover_latents, num_inference_steps=steps,
                    strength 0.5, seed refiner_seed) (latents as the image, noised: no
                    denoising_start)

Images and latents must match within 1e-3.
"""
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402
from gen_clip_fixtures import randomise as randomise_clip  # noqa: E402
from gen_diffusion_fixtures import randomise  # noqa: E402
from gen_sdxl_fixtures import SDXL_SCHEDULER, UNET, tiny_vae  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")
REFINER = os.path.join(OUT, "sdxl_refiner_tiny")

# name: (prompt, prompt_2, negative_prompt, guidance, steps, strength, seed, aesthetic_score,
#        negative_aesthetic_score, num_images_per_prompt, H, W)
RUNS = {
    # the defaults: strength 0.3, aesthetic scores 6.0 / 2.5, "" as the negative prompt
    # (force_zeros_for_empty_prompt is false in a refiner), encoded
    "refine": ("a photo of a cat", None, None, 5.0, 10, None, 51, None, None, 1, 16, 16),
    # other scores, a negative prompt, another size (time ids from the image)
    "scores": ("a red cube on a table", None, "blurry", 4.0, 5, 0.6, 53, 8.0, 1.0, 1, 24, 16),
    # without guidance only the prompt's time ids (its aesthetic score) reach the UNet
    "no_cfg": ("an astronaut", None, None, 1.0, 4, 0.5, 55, 7.0, None, 1, 16, 16),
    # prompt_2 is zipped with tokenizer_2 after prompt: a refiner encodes prompt alone
    "prompt2": ("a tree by a lake", "a dog in the snow", None, 5.0, 4, 0.5, 57, None, None, 2,
                16, 16),
}


def build():
    from diffusers import (EulerDiscreteScheduler, StableDiffusionXLImg2ImgPipeline,
                           UNet2DConditionModel)
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, CLIPTokenizer
    tok2 = CLIPTokenizer.from_pretrained(os.path.join(OUT, "clip", "tok_sd2"))
    te2 = CLIPTextModelWithProjection(CLIPTextConfig(
        vocab_size=len(tok2), hidden_size=16, intermediate_size=32, num_attention_heads=2,
        num_hidden_layers=3, max_position_embeddings=77, hidden_act="gelu", projection_dim=8,
        bos_token_id=tok2.bos_token_id, eos_token_id=tok2.eos_token_id,
        pad_token_id=tok2.pad_token_id)).eval()
    randomise_clip(te2, 810)
    unet = UNet2DConditionModel(**dict(UNET, cross_attention_dim=16,
                                       projection_class_embeddings_input_dim=8 + 5 * 4)).eval()
    randomise(unet, 820)
    vae = tiny_vae(830)
    pipe = StableDiffusionXLImg2ImgPipeline(
        vae=vae, text_encoder=None, text_encoder_2=te2, tokenizer=None, tokenizer_2=tok2,
        unet=unet, scheduler=EulerDiscreteScheduler.from_config(SDXL_SCHEDULER),
        requires_aesthetics_score=True, force_zeros_for_empty_prompt=False,
        add_watermarker=False)
    pipe.set_progress_bar_config(disable=True)
    shutil.rmtree(REFINER, ignore_errors=True)
    pipe.save_pretrained(REFINER)
    return pipe


def main():
    import diffusers
    import numpy as np
    import transformers
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    assert transformers.__version__ == "5.24.0", transformers.__version__
    torch.set_num_threads(1)
    build()
    # the folder as a user has it: loaded back from disk
    from diffusers import StableDiffusionXLImg2ImgPipeline
    pipe = StableDiffusionXLImg2ImgPipeline.from_pretrained(REFINER, add_watermarker=False)
    assert pipe.config.requires_aesthetics_score and pipe.text_encoder is None
    pipe.set_progress_bar_config(disable=True)
    b = Bundle(os.path.join(OUT, "sdxl_refiner_tiny_ref"))
    meta = {}
    for name, (prompt, p2, neg, guidance, steps, strength, seed, score, neg_score, per, h,
               w) in RUNS.items():
        init = np.random.default_rng(seed).random((1, h, w, 3), dtype=np.float32)
        kw = {}
        if strength is not None:
            kw["strength"] = strength
        if score is not None:
            kw["aesthetic_score"] = score
        if neg_score is not None:
            kw["negative_aesthetic_score"] = neg_score
        with torch.no_grad():
            image = pipe(prompt, prompt_2=p2, image=init.copy(), negative_prompt=neg,
                         guidance_scale=guidance, num_inference_steps=steps,
                         num_images_per_prompt=per, output_type="np",
                         generator=torch.Generator("cpu").manual_seed(seed), **kw).images
        b.add(name + "_init", torch.from_numpy(init))
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = {"prompt": prompt, "prompt_2": p2, "negative_prompt": neg,
                      "guidance": guidance, "steps": steps, "strength": strength, "seed": seed,
                      "aesthetic_score": score, "negative_aesthetic_score": neg_score,
                      "num_images_per_prompt": per, "height": h, "width": w}
    handover = {"prompt": "a photo of a cat", "steps": 10, "split": 0.7, "base_seed": 91,
                "refiner_seed": 93, "guidance": 5.0}
    from diffusers import StableDiffusionXLPipeline
    base = StableDiffusionXLPipeline.from_pretrained(os.path.join(OUT, "sdxl_tiny"),
                                                     add_watermarker=False)
    base.set_progress_bar_config(disable=True)
    h = handover
    with torch.no_grad():
        lat = base(h["prompt"], num_inference_steps=h["steps"], denoising_end=h["split"],
                   guidance_scale=h["guidance"], output_type="latent",
                   generator=torch.Generator("cpu").manual_seed(h["base_seed"])).images
        image = pipe(h["prompt"], image=lat, num_inference_steps=h["steps"],
                     denoising_start=h["split"], guidance_scale=h["guidance"], output_type="np",
                     generator=torch.Generator("cpu").manual_seed(h["refiner_seed"])).images
        noised = pipe(h["prompt"], image=lat, num_inference_steps=h["steps"], strength=0.5,
                      guidance_scale=h["guidance"], output_type="np",
                      generator=torch.Generator("cpu").manual_seed(h["refiner_seed"])).images
    b.add("handover_latents", lat)
    b.add("handover_image", torch.from_numpy(image))
    b.add("latents_image", torch.from_numpy(noised))
    b.meta = {"runs": meta, "handover": handover}
    n, nbytes = b.write()
    print("sdxl_refiner_tiny_ref: %d tensors, %d bytes" % (n, nbytes))
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
