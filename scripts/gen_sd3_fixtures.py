#!/usr/bin/env python3
"""A tiny random StableDiffusion3Pipeline folder (no T5), diffusers' outputs from it, and a
second SD3Transformer2DModel alone (qk_norm "rms_norm", as SD3.5's).

tests/fixtures/diffusion/sd3_tiny/ is what StableDiffusion3Pipeline.save_pretrained writes with
text_encoder_3 = tokenizer_3 = None: tokenizer (clip/tok_slow) and tokenizer_2 (clip/tok_sd2);
two CLIPTextModelWithProjection (hidden 16, projection_dim 8: pooled 8 + 8 = 16; hidden states
16 + 16 = 32, zero-padded to joint_attention_dim 48); an SD3Transformer2DModel (sample_size 8,
patch 2, 2 layers of 2 heads of 8, pos_embed_max_size 6: the 4x4 patches are a centre crop);
an AutoencoderKL with 16 latent channels, no quant convs, SD3's scaling and shift factors
(vae_scale_factor 2); FlowMatchEulerDiscreteScheduler with SD3's shift 3.0.

tests/fixtures/diffusion/sd3_tiny_ref.{json,bin} (a Bundle):

  tf_sample [2, 16, 8, 8], tf_ehs [2, 7, 48], tf_pooled [2, 16], tf_t0..tf_t2 ([2] f32, one
  value twice, as the pipeline expands it), tf_out0..tf_out2 = transformer(...).sample;
  tf_wide_sample [1, 16, 8, 12] and tf_wide_out (timestep 250.5: a non-square crop)
  qk_*: the same for sd3_qk/ (qk_norm rms_norm, 3 layers, pos_embed_max_size 8)

  per run (meta "runs": prompt, negative prompt (null: None), guidance, steps, seed, height,
  width, max_sequence_length): <run>_image = pipe(..., generator=torch.Generator("cpu")
  .manual_seed(seed), output_type="np").images, f32 [1, H, W, 3]
  prompt2_image: pipe("a photo of a cat", prompt_2="a red cube", negative_prompt="blurry",
  negative_prompt_2="", guidance_scale=5, num_inference_steps=3, max_sequence_length=8, seed 41)
  ("" falls back to negative_prompt, as `negative_prompt_2 or negative_prompt`)
  batch_image: pipe(["a photo of a cat", "a red cube"], negative_prompt=["blurry", ""],
  num_images_per_prompt=2, guidance_scale=5, num_inference_steps=2, max_sequence_length=4,
  seed 3): [4, 16, 16, 3]
  generators_image: pipe("an astronaut", num_images_per_prompt=2, generator=[seed 7, seed 8],
  guidance_scale=4, num_inference_steps=2, max_sequence_length=4): [2, 16, 16, 3]
  images2_image: the same with one seed, 9 (ember image --num-images 2)
  dynamic_image: run "negative" with the scheduler of sd3_dynamic_scheduler/ (SD3's config
  with use_dynamic_shifting, base_image_seq_len 8, max_image_seq_len 64: mu from the 16
  patches, calculate_shift)
  latents: randn_tensor((1, 16, 8, 8), generator=torch.Generator("cpu").manual_seed(123)) and
  latents_image, run "cfg" from those latents

The transformer must match within 1e-4, images within 1e-3.
"""
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
SD3 = os.path.join(OUT, "sd3_tiny")
QK = os.path.join(OUT, "sd3_qk")
DYNAMIC = os.path.join(OUT, "sd3_dynamic_scheduler")

TRANSFORMER = dict(sample_size=8, patch_size=2, in_channels=16, num_layers=2,
                   attention_head_dim=8, num_attention_heads=2, joint_attention_dim=48,
                   caption_projection_dim=16, pooled_projection_dim=16, out_channels=16,
                   pos_embed_max_size=6)
QK_TRANSFORMER = dict(TRANSFORMER, num_layers=3, pos_embed_max_size=8, qk_norm="rms_norm",
                      dual_attention_layers=())

# stabilityai/stable-diffusion-3-medium-diffusers' scheduler/scheduler_config.json
SCHEDULER = dict(num_train_timesteps=1000, shift=3.0)

# name: (prompt, negative_prompt, guidance_scale, steps, seed, height, width, max_seq_len)
RUNS = {
    "cfg": ("a photo of a cat", None, 7.0, 4, 0, 0, 0, 8),
    "negative": ("a red cube on a table", "blurry, low quality", 5.0, 3, 5, 0, 0, 8),
    "nocfg": ("an astronaut", None, 1.0, 3, 11, 0, 0, 4),
    # another size (a non-square crop of the table), the default 256 zero T5 tokens
    "size": ("a dog in the snow", "dark", 4.0, 2, 21, 16, 24, 256),
}


def text_encoders(tok, tok2):
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection
    common = dict(hidden_size=16, intermediate_size=32, num_attention_heads=2,
                  max_position_embeddings=77, bos_token_id=tok.bos_token_id,
                  eos_token_id=tok.eos_token_id, projection_dim=8)
    te = CLIPTextModelWithProjection(CLIPTextConfig(
        vocab_size=len(tok), num_hidden_layers=2, hidden_act="quick_gelu",
        pad_token_id=tok.pad_token_id, **common)).eval()
    randomise_clip(te, 800)
    te2 = CLIPTextModelWithProjection(CLIPTextConfig(
        vocab_size=len(tok2), num_hidden_layers=3, hidden_act="gelu",
        pad_token_id=tok2.pad_token_id, **common)).eval()
    randomise_clip(te2, 810)
    return te, te2


def randomise_transformer(m, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith("norm") or ".norm" in name and "linear" not in name:
                p.normal_(1.0, 0.2)  # the qk RMSNorm weights
            else:
                p.normal_(0.0, 0.15)


def tiny_transformer(cfg, seed):
    from diffusers import SD3Transformer2DModel
    m = SD3Transformer2DModel(**cfg).eval()
    randomise_transformer(m, seed)
    return m


def tiny_vae(seed):
    from diffusers import AutoencoderKL
    vae = AutoencoderKL(in_channels=3, out_channels=3,
                        down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16),
                        layers_per_block=1, latent_channels=16, norm_num_groups=4,
                        sample_size=16, scaling_factor=1.5305, shift_factor=0.0609,
                        use_quant_conv=False, use_post_quant_conv=False).eval()
    randomise(vae, seed)
    return vae


def build():
    from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline
    from transformers import CLIPTokenizer
    tok = CLIPTokenizer.from_pretrained(os.path.join(OUT, "clip", "tok_slow"))
    tok2 = CLIPTokenizer.from_pretrained(os.path.join(OUT, "clip", "tok_sd2"))
    te, te2 = text_encoders(tok, tok2)
    pipe = StableDiffusion3Pipeline(
        transformer=tiny_transformer(TRANSFORMER, 820), vae=tiny_vae(830),
        scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), text_encoder=te, tokenizer=tok,
        text_encoder_2=te2, tokenizer_2=tok2, text_encoder_3=None, tokenizer_3=None)
    shutil.rmtree(SD3, ignore_errors=True)
    pipe.save_pretrained(SD3)
    shutil.rmtree(DYNAMIC, ignore_errors=True)
    FlowMatchEulerDiscreteScheduler(**SCHEDULER, use_dynamic_shifting=True, base_image_seq_len=8,
                                    max_image_seq_len=64).save_pretrained(DYNAMIC)
    qk = tiny_transformer(QK_TRANSFORMER, 840)
    shutil.rmtree(QK, ignore_errors=True)
    qk.save_pretrained(QK)


def transformer_case(b, prefix, path, seed):
    from diffusers import SD3Transformer2DModel
    m = SD3Transformer2DModel.from_pretrained(path, torch_dtype=torch.float32).eval()
    cfg = m.config
    g = torch.Generator().manual_seed(seed)
    sample = torch.randn((2, 16, 8, 8), generator=g)
    ehs = torch.randn((2, 7, cfg.joint_attention_dim), generator=g)
    pooled = torch.randn((2, cfg.pooled_projection_dim), generator=g)
    wide = torch.randn((1, 16, 8, 12), generator=g)
    for k, v in (("sample", sample), ("ehs", ehs), ("pooled", pooled), ("wide_sample", wide)):
        b.add(prefix + k, v)
    with torch.no_grad():
        for k, t in enumerate((1000.0, 500.5, 3.0)):
            tt = torch.tensor([t, t], dtype=torch.float32)
            b.add("%st%d" % (prefix, k), tt)
            b.add("%sout%d" % (prefix, k),
                  m(sample, encoder_hidden_states=ehs, pooled_projections=pooled,
                    timestep=tt).sample)
        b.add(prefix + "wide_out",
              m(wide, encoder_hidden_states=ehs[:1], pooled_projections=pooled[:1],
                timestep=torch.tensor([250.5])).sample)


def run(pipe, prompt, neg, guidance, steps, seed, h, w, msl, latents=None, **kw):
    if h:
        kw.update(height=h, width=w)
    with torch.no_grad():
        return pipe(prompt, negative_prompt=neg, guidance_scale=guidance,
                    num_inference_steps=steps, max_sequence_length=msl, output_type="np",
                    generator=torch.Generator("cpu").manual_seed(seed), latents=latents,
                    **kw).images


def main():
    from diffusers import StableDiffusion3Pipeline
    from diffusers.utils.torch_utils import randn_tensor
    build()
    b = Bundle(os.path.join(OUT, "sd3_tiny_ref"))
    transformer_case(b, "tf_", os.path.join(SD3, "transformer"), 850)
    transformer_case(b, "qk_", QK, 860)
    pipe = StableDiffusion3Pipeline.from_pretrained(SD3, torch_dtype=torch.float32,
                                                    text_encoder_3=None, tokenizer_3=None)
    pipe.set_progress_bar_config(disable=True)
    meta = {}
    for name, (prompt, neg, guidance, steps, seed, h, w, msl) in RUNS.items():
        image = run(pipe, prompt, neg, guidance, steps, seed, h, w, msl)
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = {"prompt": prompt, "negative_prompt": neg, "guidance": guidance,
                      "steps": steps, "seed": seed, "height": h, "width": w,
                      "max_sequence_length": msl}
    latents = randn_tensor((1, 16, 8, 8), generator=torch.Generator("cpu").manual_seed(123))
    b.add("latents", latents)
    prompt, neg, guidance, steps, seed, h, w, msl = RUNS["cfg"]
    b.add("latents_image", torch.from_numpy(run(pipe, prompt, neg, guidance, steps, seed, h, w,
                                                 msl, latents=latents.clone())))
    b.add("prompt2_image", torch.from_numpy(run(
        pipe, "a photo of a cat", "blurry", 5.0, 3, 41, 0, 0, 8, prompt_2="a red cube",
        negative_prompt_2="")))
    with torch.no_grad():
        b.add("batch_image", torch.from_numpy(pipe(
            ["a photo of a cat", "a red cube"], negative_prompt=["blurry", ""],
            num_images_per_prompt=2, guidance_scale=5.0, num_inference_steps=2,
            max_sequence_length=4, output_type="np",
            generator=torch.Generator("cpu").manual_seed(3)).images))
        b.add("generators_image", torch.from_numpy(pipe(
            "an astronaut", num_images_per_prompt=2, guidance_scale=4.0, num_inference_steps=2,
            max_sequence_length=4, output_type="np",
            generator=[torch.Generator("cpu").manual_seed(s) for s in (7, 8)]).images))
        b.add("images2_image", torch.from_numpy(pipe(
            "an astronaut", num_images_per_prompt=2, guidance_scale=4.0, num_inference_steps=2,
            max_sequence_length=4, output_type="np",
            generator=torch.Generator("cpu").manual_seed(9)).images))
    from diffusers import FlowMatchEulerDiscreteScheduler
    pipe.scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(DYNAMIC)
    assert pipe.scheduler.config.use_dynamic_shifting
    prompt, neg, guidance, steps, seed, h, w, msl = RUNS["negative"]
    b.add("dynamic_image", torch.from_numpy(run(pipe, prompt, neg, guidance, steps, seed, h, w,
                                                msl)))
    b.meta = {"runs": meta}
    print(b.write())


if __name__ == "__main__":
    main()
