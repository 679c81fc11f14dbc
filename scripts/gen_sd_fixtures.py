#!/usr/bin/env python3
"""A tiny random StableDiffusionPipeline folder and diffusers' images from it.

tests/fixtures/diffusion/sd_tiny/ is what StableDiffusionPipeline.save_pretrained writes: the
CLIP tokenizer of tests/fixtures/diffusion/clip/tok_slow (vocab.json + merges.txt), a 2-layer
CLIPTextModel (hidden 16), a UNet2DConditionModel (SD 1.x layout, cross_attention_dim 16), an
AutoencoderKL (two levels: vae_scale_factor 2) and Stable Diffusion 1.5's PNDMScheduler config;
no safety checker. tests/fixtures/diffusion/sd_tiny_vpred_scheduler/ holds an SD 2.x-style
DDIMScheduler config (v_prediction) that the test swaps in.

tests/fixtures/diffusion/sd_tiny_ref.{json,bin} (a Bundle), per run (meta "runs" lists them with
their prompt, negative prompt, guidance, steps, seed, and whether latents were given):

  <run>_latents  the initial latents [1, 4, 8, 8] (drawn from torch.Generator("cpu").manual_seed
                 (seed), passed as latents= when the run has "latents": true)
  <run>_image    pipe(..., output_type="np").images: f32 [1, 16, 16, 3]

Ember must match within 1e-3.
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
SD = os.path.join(OUT, "sd_tiny")
VPRED = os.path.join(OUT, "sd_tiny_vpred_scheduler")

SD15_SCHEDULER = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                      num_train_timesteps=1000, set_alpha_to_one=False, skip_prk_steps=True,
                      steps_offset=1, trained_betas=None)

# name: (prompt, negative_prompt, guidance_scale, steps, seed, latents given, v-pred scheduler)
RUNS = {
    "cfg": ("a photo of a cat", None, 7.5, 4, 0, True, False),
    "negative": ("a red cube on a table", "blurry, low quality", 3.0, 3, 5, False, False),
    "no_cfg": ("an astronaut", None, 1.0, 3, 11, True, False),
    "vpred": ("a dog in the snow", "", 5.0, 3, 21, True, True),
}


def build():
    from diffusers import (AutoencoderKL, PNDMScheduler, StableDiffusionPipeline,
                           UNet2DConditionModel)
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer
    tok = CLIPTokenizer.from_pretrained(os.path.join(OUT, "clip", "tok_slow"))
    tcfg = CLIPTextConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32,
                          num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=77,
                          hidden_act="quick_gelu", bos_token_id=tok.bos_token_id,
                          eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    te = CLIPTextModel(tcfg).eval()
    randomise_clip(te, 600)
    unet = UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4,
                                down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
                                block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4,
                                cross_attention_dim=16, attention_head_dim=2).eval()
    randomise(unet, 610)
    vae = AutoencoderKL(in_channels=3, out_channels=3,
                        down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16),
                        layers_per_block=1, latent_channels=4, norm_num_groups=4, sample_size=16,
                        scaling_factor=0.18215).eval()
    randomise(vae, 620)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=te, tokenizer=tok, unet=unet,
                                   scheduler=PNDMScheduler(**SD15_SCHEDULER), safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    shutil.rmtree(SD, ignore_errors=True)
    pipe.save_pretrained(SD)
    return pipe


def main():
    import diffusers
    from diffusers import DDIMScheduler
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    torch.set_num_threads(1)
    pipe = build()
    pndm = pipe.scheduler
    vpred = DDIMScheduler.from_config(pndm.config, prediction_type="v_prediction",
                                      timestep_spacing="trailing")
    shutil.rmtree(VPRED, ignore_errors=True)
    vpred.save_pretrained(VPRED)
    b = Bundle(os.path.join(OUT, "sd_tiny_ref"))
    meta = {}
    for name, (prompt, neg, guidance, steps, seed, given, vp) in RUNS.items():
        pipe.scheduler = vpred if vp else pndm
        latents = torch.randn((1, 4, 8, 8), generator=torch.Generator("cpu").manual_seed(seed))
        kw = {"latents": latents.clone()} if given else {}
        with torch.no_grad():
            image = pipe(prompt, negative_prompt=neg, guidance_scale=guidance,
                         num_inference_steps=steps, output_type="np",
                         generator=torch.Generator("cpu").manual_seed(seed), **kw).images
        b.add(name + "_latents", latents)
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = {"prompt": prompt, "negative_prompt": neg, "guidance": guidance,
                      "steps": steps, "seed": seed, "latents": given, "vpred": vp}
    b.meta = {"runs": meta}
    n, nbytes = b.write()
    print("sd_tiny_ref: %d tensors, %d bytes" % (n, nbytes))
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
