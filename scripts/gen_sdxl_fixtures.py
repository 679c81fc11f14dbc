#!/usr/bin/env python3
"""A tiny random StableDiffusionXLPipeline folder, diffusers' images from it, and its UNet alone.

tests/fixtures/diffusion/sdxl_tiny/ is what StableDiffusionXLPipeline.save_pretrained writes
(force_zeros_for_empty_prompt true, no watermarker): tokenizer (tests/fixtures/diffusion/clip/
tok_slow, pad <|endoftext|>) and tokenizer_2 (clip/tok_sd2, pad "!"), as SDXL's two differ; a
CLIPTextModel (hidden 16) and a CLIPTextModelWithProjection (hidden 16, projection_dim 8); a
UNet2DConditionModel with addition_embed_type "text_time" (addition_time_embed_dim 4,
projection_class_embeddings_input_dim 8 + 6 * 4 = 32, cross_attention_dim 16 + 16,
transformer_layers_per_block a list, linear projections, SDXL's block order); an AutoencoderKL
(vae_scale_factor 2) and SDXL's EulerDiscreteScheduler config.

tests/fixtures/diffusion/sdxl_tiny_ref.{json,bin} (a Bundle), per run (meta "runs": prompt,
negative prompt (null: None), guidance, steps, seed, height, width):

  <run>_image    pipe(..., generator=torch.Generator("cpu").manual_seed(seed),
                 output_type="np").images: f32 [1, H, W, 3]
  batch_image    pipe(["a photo of a cat", "a red cube"], num_images_per_prompt=2,
                 guidance_scale=5, num_inference_steps=2, seed 3): [4, 16, 16, 3]

StableDiffusionXLImg2ImgPipeline.from_pretrained(sdxl_tiny) (the base folder: requires_aesthetics_score
false), per run (meta "img2img": prompt, negative prompt, guidance, steps, strength (null: the
default 0.3), seed):

  <run>_init     the init image, f32 [1, H, W, 3] in [0, 1] (seeded numpy)
  <run>_image    pipe(prompt, image=<run>_init, strength=..., generator=torch.Generator("cpu")
                 .manual_seed(seed), output_type="np").images

second prompts (meta "prompt_2": prompt, prompt_2, negative_prompt, negative_prompt_2, guidance,
steps, seed), StableDiffusionXLPipeline:

  <run>_image    pipe(prompt, prompt_2=..., negative_prompt=..., negative_prompt_2=..., ...)
  batch2_image   pipe(["a photo of a cat", "a red cube"], prompt_2=["a dog", "a tree"],
                 negative_prompt=["blurry", "dark"], negative_prompt_2=["", "low quality"],
                 guidance_scale=5, num_inference_steps=2, seed 47): [2, 16, 16, 3]

and the UNet alone (added_cond_kwargs given):

  unet_sample [2, 4, 8, 8], unet_ehs [2, 5, 32], unet_text_embeds [2, 8], unet_time_ids [2, 6]
  unet_t0..unet_t2 (0-d timesteps), unet_out0..unet_out2 unet(...).sample

Images must match within 1e-3, the UNet within 1e-4.
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

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")
SDXL = os.path.join(OUT, "sdxl_tiny")

# stabilityai/stable-diffusion-xl-base-1.0's scheduler/scheduler_config.json
SDXL_SCHEDULER = dict(beta_end=0.012, beta_schedule="scaled_linear", beta_start=0.00085,
                      clip_sample=False, interpolation_type="linear", num_train_timesteps=1000,
                      prediction_type="epsilon", sample_max_value=1.0, set_alpha_to_one=False,
                      skip_prk_steps=True, steps_offset=1, timestep_spacing="leading",
                      trained_betas=None, use_karras_sigmas=False)

# name: (prompt, negative_prompt, guidance_scale, steps, seed, height, width)
RUNS = {
    # negative None with force_zeros_for_empty_prompt: zero negative embeddings
    "cfg": ("a photo of a cat", None, 5.0, 4, 0, 0, 0),
    "negative": ("a red cube on a table", "blurry, low quality", 5.0, 3, 5, 0, 0),
    # "" is a prompt: encoded, not zeroed
    "empty_negative": ("an astronaut", "", 5.0, 3, 11, 0, 0),
    # another size: other time ids
    "size": ("a dog in the snow", None, 3.0, 3, 21, 24, 16),
}

# name: (prompt, negative_prompt, guidance_scale, steps, strength (None: default), seed, H, W)
IMG2IMG = {
    "img2img": ("a photo of a cat", None, 5.0, 5, 0.6, 31, 16, 16),
    # another size (time ids from the image), a negative prompt, the default strength 0.3
    "img2img_size": ("a red cube on a table", "blurry", 3.0, 10, None, 37, 24, 16),
}

# name: (prompt, prompt_2, negative_prompt, negative_prompt_2, guidance_scale, steps, seed)
PROMPT2 = {
    "prompt2": ("a photo of a cat", "a red cube", "blurry", "low quality", 5.0, 3, 41),
    # negative_prompt None: zeroed whatever negative_prompt_2 is (force_zeros_for_empty_prompt)
    "prompt2_zero": ("an astronaut", "a dog in the snow", None, "dark", 5.0, 3, 43),
    # "" as prompt_2 / negative_prompt_2: `prompt_2 or prompt`, the first prompts again
    "prompt2_empty": ("a tree by a lake", "", "blurry", "", 4.0, 3, 45),
}


def text_encoders(tok, tok2):
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection
    common = dict(hidden_size=16, intermediate_size=32, num_attention_heads=2,
                  max_position_embeddings=77, bos_token_id=tok.bos_token_id,
                  eos_token_id=tok.eos_token_id)
    te = CLIPTextModel(CLIPTextConfig(vocab_size=len(tok), num_hidden_layers=2,
                                      hidden_act="quick_gelu", pad_token_id=tok.pad_token_id,
                                      **common)).eval()
    randomise_clip(te, 700)
    te2 = CLIPTextModelWithProjection(CLIPTextConfig(
        vocab_size=len(tok2), num_hidden_layers=3, hidden_act="gelu", projection_dim=8,
        pad_token_id=tok2.pad_token_id, **common)).eval()
    randomise_clip(te2, 710)
    return te, te2


UNET = dict(sample_size=8, in_channels=4, out_channels=4,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4,
            cross_attention_dim=32, attention_head_dim=[2, 4],
            transformer_layers_per_block=[1, 2], use_linear_projection=True,
            addition_embed_type="text_time", addition_time_embed_dim=4,
            projection_class_embeddings_input_dim=8 + 6 * 4)


def tiny_vae(seed):
    """A two-level AutoencoderKL (vae_scale_factor 2) with SDXL's scaling factor, randomised."""
    from diffusers import AutoencoderKL
    vae = AutoencoderKL(in_channels=3, out_channels=3,
                        down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16),
                        layers_per_block=1, latent_channels=4, norm_num_groups=4, sample_size=16,
                        scaling_factor=0.13025).eval()
    randomise(vae, seed)
    return vae


def build():
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPTokenizer
    tok = CLIPTokenizer.from_pretrained(os.path.join(OUT, "clip", "tok_slow"))
    tok2 = CLIPTokenizer.from_pretrained(os.path.join(OUT, "clip", "tok_sd2"))
    te, te2 = text_encoders(tok, tok2)
    unet = UNet2DConditionModel(**UNET).eval()
    randomise(unet, 720)
    vae = tiny_vae(730)
    pipe = StableDiffusionXLPipeline(vae=vae, text_encoder=te, text_encoder_2=te2, tokenizer=tok,
                                     tokenizer_2=tok2, unet=unet,
                                     scheduler=EulerDiscreteScheduler.from_config(SDXL_SCHEDULER),
                                     force_zeros_for_empty_prompt=True, add_watermarker=False)
    pipe.set_progress_bar_config(disable=True)
    shutil.rmtree(SDXL, ignore_errors=True)
    pipe.save_pretrained(SDXL)
    # SDXL's file carries keys EulerDiscreteScheduler ignores (from_config drops them): written
    # back as the real folder has them, so the loader is tested on them
    path = os.path.join(SDXL, "scheduler", "scheduler_config.json")
    with open(path) as f:
        sc = json.load(f)
    for k in ("clip_sample", "sample_max_value", "set_alpha_to_one", "skip_prk_steps"):
        sc[k] = SDXL_SCHEDULER[k]
    with open(path, "w") as f:
        json.dump(sc, f, indent=2, sort_keys=True)
        f.write("\n")
    return pipe


def unet_case(b, unet):
    g = torch.Generator().manual_seed(740)
    sample = torch.randn((2, 4, 8, 8), generator=g)
    ehs = torch.randn((2, 5, 32), generator=g)
    text_embeds = torch.randn((2, 8), generator=g)
    time_ids = torch.tensor([[16.0, 16.0, 0.0, 0.0, 16.0, 16.0],
                             [1024.0, 768.0, 32.0, 8.0, 512.0, 640.0]])
    for k, v in (("sample", sample), ("ehs", ehs), ("text_embeds", text_embeds),
                 ("time_ids", time_ids)):
        b.add("unet_" + k, v)
    cond = {"text_embeds": text_embeds, "time_ids": time_ids}
    with torch.no_grad():
        for k, t in enumerate([torch.tensor(999.0), torch.tensor(500.5), torch.tensor(1.0)]):
            b.add("unet_t%d" % k, t)
            b.add("unet_out%d" % k, unet(sample, t, ehs, added_cond_kwargs=cond).sample)


def img2img_cases(b):
    """StableDiffusionXLImg2ImgPipeline on the saved base folder."""
    import numpy as np
    from diffusers import StableDiffusionXLImg2ImgPipeline
    pipe = StableDiffusionXLImg2ImgPipeline.from_pretrained(SDXL, add_watermarker=False)
    assert not pipe.config.requires_aesthetics_score
    pipe.set_progress_bar_config(disable=True)
    meta = {}
    for name, (prompt, neg, guidance, steps, strength, seed, h, w) in IMG2IMG.items():
        init = np.random.default_rng(seed).random((1, h, w, 3), dtype=np.float32)
        kw = {} if strength is None else {"strength": strength}
        with torch.no_grad():
            image = pipe(prompt, image=init.copy(), negative_prompt=neg, guidance_scale=guidance,
                         num_inference_steps=steps, output_type="np",
                         generator=torch.Generator("cpu").manual_seed(seed), **kw).images
        b.add(name + "_init", torch.from_numpy(init))
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = {"prompt": prompt, "negative_prompt": neg, "guidance": guidance,
                      "steps": steps, "strength": strength, "seed": seed}
    return meta


def main():
    import diffusers
    import transformers
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    assert transformers.__version__ == "5.24.0", transformers.__version__
    torch.set_num_threads(1)
    pipe = build()
    b = Bundle(os.path.join(OUT, "sdxl_tiny_ref"))
    meta = {}
    # a batch: two prompts, two images each (zeroed negatives repeated as the prompts are)
    with torch.no_grad():
        image = pipe(["a photo of a cat", "a red cube"], guidance_scale=5.0,
                     num_inference_steps=2, num_images_per_prompt=2, output_type="np",
                     generator=torch.Generator("cpu").manual_seed(3)).images
    b.add("batch_image", torch.from_numpy(image))
    for name, (prompt, neg, guidance, steps, seed, h, w) in RUNS.items():
        kw = {"height": h, "width": w} if h else {}
        with torch.no_grad():
            image = pipe(prompt, negative_prompt=neg, guidance_scale=guidance,
                         num_inference_steps=steps, output_type="np",
                         generator=torch.Generator("cpu").manual_seed(seed), **kw).images
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = {"prompt": prompt, "negative_prompt": neg, "guidance": guidance,
                      "steps": steps, "seed": seed, "height": h, "width": w}
    meta2 = {}
    for name, (prompt, p2, neg, neg2, guidance, steps, seed) in PROMPT2.items():
        with torch.no_grad():
            image = pipe(prompt, prompt_2=p2, negative_prompt=neg, negative_prompt_2=neg2,
                         guidance_scale=guidance, num_inference_steps=steps, output_type="np",
                         generator=torch.Generator("cpu").manual_seed(seed)).images
        b.add(name + "_image", torch.from_numpy(image))
        meta2[name] = {"prompt": prompt, "prompt_2": p2, "negative_prompt": neg,
                       "negative_prompt_2": neg2, "guidance": guidance, "steps": steps,
                       "seed": seed}
    with torch.no_grad():
        image = pipe(["a photo of a cat", "a red cube"], prompt_2=["a dog", "a tree"],
                     negative_prompt=["blurry", "dark"], negative_prompt_2=["", "low quality"],
                     guidance_scale=5.0, num_inference_steps=2, output_type="np",
                     generator=torch.Generator("cpu").manual_seed(47)).images
    b.add("batch2_image", torch.from_numpy(image))
    unet_case(b, pipe.unet)
    meta_i2i = img2img_cases(b)
    b.meta = {"runs": meta, "img2img": meta_i2i, "prompt_2": meta2}
    n, nbytes = b.write()
    print("sdxl_tiny_ref: %d tensors, %d bytes" % (n, nbytes))
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
