#!/usr/bin/env python3
"""A tiny random FluxPipeline folder, diffusers 0.42's outputs from it, and a second
FluxTransformer2DModel alone (guidance_embeds false, as FLUX.1-schnell's).

tests/fixtures/diffusion/flux_tiny/ is what FluxPipeline.save_pretrained writes: tokenizer
(clip/tok_slow) and text_encoder a CLIPTextModel (hidden 16: pooled_projection_dim); tokenizer_2
the tiny T5 tokenizer of t5/tok and text_encoder_2 the T5EncoderModel of
scripts/gen_sd3_t5_fixtures.py (d_model 48: joint_attention_dim); a FluxTransformer2DModel
(in_channels 64 = 16 latent channels packed 2x2, 2 double-stream and 2 single-stream blocks of 2
heads of 8, axes_dims_rope (2, 2, 4), guidance_embeds true, as FLUX.1-dev); sd3_tiny's
AutoencoderKL (16 latent channels, scaling and shift factors, vae_scale_factor 2); and
FLUX.1-dev's FlowMatchEulerDiscreteScheduler config (use_dynamic_shifting, shift 3). vae,
tokenizer, text_encoder_2 and tokenizer_2 are symbolic links to the SD3 fixtures' folders holding
the same bytes (checked when written).

tests/fixtures/diffusion/flux_tiny_ref.{json,bin} (a Bundle):

  tf_hidden [2, 12, 64] (a 3x4 grid of packed latents), tf_ehs [2, 5, 48], tf_pooled [2, 16],
  tf_img_ids [12, 3] (_prepare_latent_image_ids(3, 4), axis 0 set to 1), tf_txt_ids [5, 3]
  (small integers on all three axes), tf_guidance [2], tf_t0..tf_t2 ([2], timestep / 1000 as the
  pipeline passes it), tf_out0..tf_out2 = transformer(...).sample
  sc_*: the same for flux_schnell/ (guidance_embeds false, no guidance input; out_channels 32,
  patch_size 2: proj_out gives 4 * 32 features)

  per run (meta "runs": prompt, prompt_2 (null: None), guidance, steps, seed, height, width,
  max_sequence_length): <run>_image = pipe(..., generator=torch.Generator("cpu")
  .manual_seed(seed), output_type="np").images, f32 [1, H, W, 3]
  latents: randn_tensor((1, 16, 8, 8), generator seed 123) packed 2x2 ([1, 16, 64], as
  FluxPipeline takes them) and latents_image, run "dev" from those latents
  batch_image: pipe(["a photo of a cat", "a red cube"], prompt_2=["a blue sphere", "a dog"],
  num_images_per_prompt=2, guidance_scale=4, num_inference_steps=2, 16x16,
  max_sequence_length=6, seed 3): [4, 16, 16, 3]
  sched_sigmas / sched_timesteps: the scheduler's after retrieve_timesteps(sigmas=
  np.linspace(1.0, 1 / 7, 7), mu=calculate_shift(16, ...)) as FluxPipeline calls it (meta
  "sched_mu": that mu)
  generators_image: pipe("an astronaut", num_images_per_prompt=2, generator=[seed 7, seed 8],
  guidance_scale=3, num_inference_steps=2, 16x16, max_sequence_length=6): [2, 16, 16, 3]

tests/fixtures/diffusion/flux_tiny_bf16.{json,bin} (a Bundle): flux_tiny's transformer in
bfloat16 on tf_'s inputs (the same seed, so the same values, stored again as bf16) at timestep
0.5005: hidden, ehs, pooled (bf16), img_ids, txt_ids, t, guidance (f32), out = the bf16 model's
sample (bf16), and out_f32 = the f32 model's on the same (bf16-rounded) inputs. meta
"bf16_vs_f32": max |out - out_f32|, torch's own bf16 error on this model and input.

The transformer must match within 1e-4, images within 1e-3; Ember's bf16 transformer within
bf16_vs_f32 of diffusers' bf16 output (--bf16-only writes just that bundle).
"""
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402
from gen_clip_fixtures import randomise as randomise_clip  # noqa: E402
from gen_sd3_fixtures import randomise_transformer, tiny_vae  # noqa: E402
from gen_sd3_t5_fixtures import text_encoder_3  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")
FLUX = os.path.join(OUT, "flux_tiny")
SCHNELL = os.path.join(OUT, "flux_schnell")

TRANSFORMER = dict(patch_size=1, in_channels=64, num_layers=2, num_single_layers=2,
                   attention_head_dim=8, num_attention_heads=2, joint_attention_dim=48,
                   pooled_projection_dim=16, guidance_embeds=True, axes_dims_rope=(2, 2, 4))
SCHNELL_TRANSFORMER = dict(TRANSFORMER, guidance_embeds=False, out_channels=32, patch_size=2,
                           num_layers=1, num_single_layers=3, axes_dims_rope=(4, 2, 2))

# black-forest-labs/FLUX.1-dev's scheduler/scheduler_config.json
SCHEDULER = dict(base_image_seq_len=256, base_shift=0.5, max_image_seq_len=4096, max_shift=1.15,
                 num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True)

# name: (prompt, prompt_2, guidance_scale, steps, seed, height, width, max_seq_len)
RUNS = {
    "dev": ("a photo of a cat", None, 3.5, 4, 0, 16, 16, 8),
    "prompt2": ("a red cube on a table", "a blue sphere", 5.0, 3, 5, 16, 16, 8),
    "size": ("a dog in the snow", None, 2.0, 2, 21, 16, 24, 6),
}


# components that save_pretrained writes byte for byte as the SD3 fixtures hold them: symbolic
# links to those (checked equal first), to keep the fixtures small
SHARED = {"vae": "sd3_tiny/vae", "tokenizer": "sd3_tiny/tokenizer",
          "text_encoder_2": "sd3_t5/text_encoder_3", "tokenizer_2": "sd3_t5/tokenizer_3"}


def link_same(folder):
    import filecmp
    for name, target in SHARED.items():
        here, there = os.path.join(folder, name), os.path.join(OUT, target)
        files = sorted(os.listdir(here))
        if files != sorted(os.listdir(there)) or \
                filecmp.cmpfiles(here, there, files, shallow=False)[0] != files:
            continue
        shutil.rmtree(here)
        os.symlink(os.path.join("..", target), here)


def tiny_transformer(cfg, seed):
    from diffusers import FluxTransformer2DModel
    m = FluxTransformer2DModel(**cfg).eval()
    randomise_transformer(m, seed)
    return m


def build():
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer, T5Tokenizer
    tok = CLIPTokenizer.from_pretrained(os.path.join(OUT, "clip", "tok_slow"))
    te = CLIPTextModel(CLIPTextConfig(
        vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_attention_heads=2,
        num_hidden_layers=2, max_position_embeddings=77, hidden_act="quick_gelu",
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id)).eval()
    randomise_clip(te, 900)
    tok2 = T5Tokenizer.from_pretrained(os.path.join(OUT, "t5", "tok"))
    pipe = FluxPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER),
                        vae=tiny_vae(830), text_encoder=te, tokenizer=tok,
                        text_encoder_2=text_encoder_3(len(tok2)), tokenizer_2=tok2,
                        transformer=tiny_transformer(TRANSFORMER, 910))
    shutil.rmtree(FLUX, ignore_errors=True)
    pipe.save_pretrained(FLUX)
    link_same(FLUX)
    shutil.rmtree(SCHNELL, ignore_errors=True)
    tiny_transformer(SCHNELL_TRANSFORMER, 920).save_pretrained(SCHNELL)


def transformer_case(b, prefix, path, seed):
    from diffusers import FluxPipeline, FluxTransformer2DModel
    m = FluxTransformer2DModel.from_pretrained(path, torch_dtype=torch.float32).eval()
    cfg = m.config
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn((2, 12, cfg.in_channels), generator=g)
    ehs = torch.randn((2, 5, cfg.joint_attention_dim), generator=g)
    pooled = torch.randn((2, cfg.pooled_projection_dim), generator=g)
    img_ids = FluxPipeline._prepare_latent_image_ids(1, 3, 4, "cpu", torch.float32)
    img_ids[:, 0] = 1.0
    txt_ids = torch.randint(0, 7, (5, 3), generator=g).float()
    guidance = torch.tensor([3.5, 3.5]) if cfg.guidance_embeds else None
    for k, v in (("hidden", hidden), ("ehs", ehs), ("pooled", pooled), ("img_ids", img_ids),
                 ("txt_ids", txt_ids)):
        b.add(prefix + k, v)
    if guidance is not None:
        b.add(prefix + "guidance", guidance)
    with torch.no_grad():
        for k, t in enumerate((1.0, 0.5005, 0.003)):
            tt = torch.tensor([t, t], dtype=torch.float32)
            b.add("%st%d" % (prefix, k), tt)
            b.add("%sout%d" % (prefix, k),
                  m(hidden, encoder_hidden_states=ehs, pooled_projections=pooled, timestep=tt,
                    img_ids=img_ids, txt_ids=txt_ids, guidance=guidance).sample)


def bf16_case():
    from diffusers import FluxPipeline, FluxTransformer2DModel
    path = os.path.join(FLUX, "transformer")
    f32 = FluxTransformer2DModel.from_pretrained(path, torch_dtype=torch.float32).eval()
    bf16 = FluxTransformer2DModel.from_pretrained(path, torch_dtype=torch.bfloat16).eval()
    cfg = f32.config
    g = torch.Generator().manual_seed(930)  # transformer_case's tf_ inputs
    hidden = torch.randn((2, 12, cfg.in_channels), generator=g).bfloat16()
    ehs = torch.randn((2, 5, cfg.joint_attention_dim), generator=g).bfloat16()
    pooled = torch.randn((2, cfg.pooled_projection_dim), generator=g).bfloat16()
    img_ids = FluxPipeline._prepare_latent_image_ids(1, 3, 4, "cpu", torch.float32)
    img_ids[:, 0] = 1.0
    txt_ids = torch.randint(0, 7, (5, 3), generator=g).float()
    t = torch.tensor([0.5005, 0.5005])
    guidance = torch.tensor([3.5, 3.5])
    with torch.no_grad():
        out = bf16(hidden, encoder_hidden_states=ehs, pooled_projections=pooled, timestep=t,
                   img_ids=img_ids, txt_ids=txt_ids, guidance=guidance).sample
        ref = f32(hidden.float(), encoder_hidden_states=ehs.float(),
                  pooled_projections=pooled.float(), timestep=t, img_ids=img_ids,
                  txt_ids=txt_ids, guidance=guidance).sample
    b = Bundle(os.path.join(OUT, "flux_tiny_bf16"))
    for k, v in (("hidden", hidden), ("ehs", ehs), ("pooled", pooled), ("img_ids", img_ids),
                 ("txt_ids", txt_ids), ("t", t), ("guidance", guidance), ("out", out),
                 ("out_f32", ref)):
        b.add(k, v)
    b.meta = {"bf16_vs_f32": (out.float() - ref).abs().max().item()}
    print(b.write(), b.meta)


def run(pipe, prompt, prompt_2, guidance, steps, seed, h, w, msl, latents=None):
    with torch.no_grad():
        return pipe(prompt, prompt_2=prompt_2, guidance_scale=guidance, num_inference_steps=steps,
                    height=h, width=w, max_sequence_length=msl, output_type="np",
                    generator=torch.Generator("cpu").manual_seed(seed), latents=latents).images


def main():
    if sys.argv[1:] == ["--bf16-only"]:
        bf16_case()
        return
    from diffusers import FluxPipeline
    from diffusers.utils.torch_utils import randn_tensor
    build()
    b = Bundle(os.path.join(OUT, "flux_tiny_ref"))
    transformer_case(b, "tf_", os.path.join(FLUX, "transformer"), 930)
    transformer_case(b, "sc_", SCHNELL, 940)
    pipe = FluxPipeline.from_pretrained(FLUX, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    meta = {}
    for name, args in RUNS.items():
        b.add(name + "_image", torch.from_numpy(run(pipe, *args)))
        meta[name] = dict(zip(("prompt", "prompt_2", "guidance", "steps", "seed", "height",
                               "width", "max_sequence_length"), args))
    latents = randn_tensor((1, 16, 8, 8), generator=torch.Generator("cpu").manual_seed(123))
    packed = FluxPipeline._pack_latents(latents, 1, 16, 8, 8)
    b.add("latents", packed)
    b.add("latents_image", torch.from_numpy(run(pipe, *RUNS["dev"], latents=packed.clone())))
    with torch.no_grad():
        b.add("batch_image", torch.from_numpy(pipe(
            ["a photo of a cat", "a red cube"], prompt_2=["a blue sphere", "a dog"],
            num_images_per_prompt=2, guidance_scale=4.0, num_inference_steps=2, height=16,
            width=16, max_sequence_length=6, output_type="np",
            generator=torch.Generator("cpu").manual_seed(3)).images))
        b.add("generators_image", torch.from_numpy(pipe(
            "an astronaut", num_images_per_prompt=2, guidance_scale=3.0, num_inference_steps=2,
            height=16, width=16, max_sequence_length=6, output_type="np",
            generator=[torch.Generator("cpu").manual_seed(s) for s in (7, 8)]).images))
    import numpy as np
    from diffusers.pipelines.flux.pipeline_flux import calculate_shift, retrieve_timesteps
    cfg = pipe.scheduler.config
    mu = calculate_shift(16, cfg.base_image_seq_len, cfg.max_image_seq_len, cfg.base_shift,
                         cfg.max_shift)
    retrieve_timesteps(pipe.scheduler, 7, "cpu", sigmas=np.linspace(1.0, 1 / 7, 7), mu=mu)
    b.add("sched_sigmas", pipe.scheduler.sigmas.float())
    b.add("sched_timesteps", pipe.scheduler.timesteps.float())
    b.meta = {"runs": meta, "sched_mu": mu}
    print(b.write())
    bf16_case()


if __name__ == "__main__":
    main()
