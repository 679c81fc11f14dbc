#!/usr/bin/env python3
"""Tiny random DiT (DiTTransformer2DModel) folders and a DiTPipeline with diffusers' outputs.

Written to tests/fixtures/diffusion/ (weights saved as float16 to keep the files small; every
reference is computed by the model loaded back from the folder in float32, which is exactly
what Ember loads):

  dit_pipe/            a DiTPipeline folder: transformer (DiTTransformer2DModel, 1000 classes
                       since DiTPipeline's null class is the literal 1000, learned sigma:
                       out_channels = 2 * in_channels), vae (a tiny AutoencoderKL), scheduler
                       (DDIMScheduler)
  dit_geglu/           a transformer alone: geglu feed-forward, no q/k/v bias, affine norm3,
                       norm_eps 1e-4, patch 1, out_channels null, 10 classes
  dit_legacy/          a transformer saved as "Transformer2DModel" (the class name of the
                       facebook/DiT-* folders; diffusers remaps it): gelu, patch 4

  <case>_ref.{json,bin}  (a Bundle)
    sample [2, C, H, H], class_labels i64 [2] (the second the null class), t0..t2 (i64 [2], one value twice, as the pipeline expands it),
    out0..out2 = transformer(sample, t_k, class_labels).sample, tvec [2], out_vec
  dit_runs_ref.{json,bin}
    per run: <run>_image, diffusers' DiTPipeline(..., output_type="np").images; and
    latents = randn_tensor((1, 4, 8, 8), generator=torch.Generator("cpu").manual_seed(0))

Ember must match the transformer within 1e-4 and the images within 1e-3.
"""
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")

TRANSFORMERS = {
    "dit_pipe": ("DiTTransformer2DModel",
                 dict(num_attention_heads=2, attention_head_dim=4, in_channels=4, out_channels=8,
                      num_layers=2, sample_size=8, patch_size=2, num_embeds_ada_norm=1000),
                 [7, 1000]),
    "dit_geglu": ("DiTTransformer2DModel",
                  dict(num_attention_heads=2, attention_head_dim=4, in_channels=3,
                       num_layers=2, sample_size=4, patch_size=1, num_embeds_ada_norm=10,
                       activation_fn="geglu", attention_bias=False,
                       norm_elementwise_affine=True, norm_eps=1e-4),
                  [9, 10]),
    "dit_legacy": ("Transformer2DModel",
                   dict(num_attention_heads=1, attention_head_dim=8, in_channels=2,
                        out_channels=4, num_layers=1, sample_size=8, patch_size=4,
                        num_embeds_ada_norm=5, activation_fn="gelu", norm_type="ada_norm_zero"),
                   [0, 5]),
}

VAE = dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
           up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(4, 8),
           layers_per_block=1, latent_channels=4, norm_num_groups=2, sample_size=16)

# run: (class label, guidance_scale, steps, seed, scheduler class swapped in or None)
RUNS = {
    "cfg": (7, 4.0, 6, 0, None),
    "nocfg": (3, 1.0, 5, 2, None),
    "ddpm_cfg": (11, 2.5, 5, 9, "DDPMScheduler"),
    "dpm_cfg": (500, 4.0, 6, 1, "DPMSolverMultistepScheduler"),
}


def randomise(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and "norm1.linear" not in name and "emb" not in name:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.2)
            else:
                p.normal_(0.0, 0.15)


def make_transformer(cls_name, cfg, seed):
    import diffusers
    m = getattr(diffusers, cls_name)(**cfg).eval()
    randomise(m, seed)
    return m


def write_transformer_ref(name, model, labels, seed):
    b = Bundle(os.path.join(OUT, name + "_ref"))
    cfg = model.config
    g = torch.Generator().manual_seed(seed + 1)
    sample = torch.randn((2, cfg.in_channels, cfg.sample_size, cfg.sample_size), generator=g)
    cl = torch.tensor(labels, dtype=torch.int64)
    b.add("sample", sample)
    b.add("class_labels", cl)
    with torch.no_grad():
        for k, t in enumerate((999, 500, 3)):
            tt = torch.tensor([t, t], dtype=torch.int64)  # DiT takes 1-d timesteps
            b.add("t%d" % k, tt)
            b.add("out%d" % k, model(sample, timestep=tt, class_labels=cl).sample)
        tvec = torch.tensor([10, 700], dtype=torch.int64)
        b.add("tvec", tvec)
        b.add("out_vec", model(sample, timestep=tvec, class_labels=cl).sample)
    b.meta = {"case": name, "class": type(model).__name__}
    return b.write()


def dit_run(labels, guidance, steps, seed, swap):
    """DiTPipeline on the committed dit_pipe folder (scheduler class `swap` swapped in unless
    None): its output_type="np" images for class_labels=labels and the scheduler's class name."""
    import diffusers
    from diffusers import DiffusionPipeline
    pipe = DiffusionPipeline.from_pretrained(os.path.join(OUT, "dit_pipe"),
                                             torch_dtype=torch.float32)
    assert type(pipe).__name__ == "DiTPipeline"
    pipe.set_progress_bar_config(disable=True)
    if swap is not None:
        pipe.scheduler = getattr(diffusers, swap).from_config(pipe.scheduler.config)
    # DiTPipeline passes no generator to scheduler.step, so a scheduler that draws noise
    # (DDPM) draws it from torch's global generator; torch.manual_seed(seed) returns that
    # generator (diffusers' own DiT example), so latents and step noise share it
    image = pipe(class_labels=labels, guidance_scale=guidance, generator=torch.manual_seed(seed),
                 num_inference_steps=steps, output_type="np").images
    return image, type(pipe.scheduler).__name__


def main():
    import diffusers
    from diffusers import (AutoencoderKL, DDIMScheduler, DiTPipeline, DiTTransformer2DModel)
    from diffusers import DiffusionPipeline
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    for i, (name, (cls_name, cfg, labels)) in enumerate(TRANSFORMERS.items()):
        d = os.path.join(OUT, name)
        shutil.rmtree(d, ignore_errors=True)
        model = make_transformer(cls_name, cfg, 500 + 10 * i)
        if name == "dit_pipe":
            vae = AutoencoderKL(**VAE).eval()
            randomise(vae, 590)
            pipe = DiTPipeline(transformer=model.half(), vae=vae.half(),
                               scheduler=DDIMScheduler(num_train_timesteps=1000))
            pipe.save_pretrained(d)
            loaded = DiTPipeline.from_pretrained(d, torch_dtype=torch.float32).transformer
        else:
            model.half().save_pretrained(d)
            loaded = DiTTransformer2DModel.from_pretrained(d, torch_dtype=torch.float32)
        loaded = loaded.float().eval()
        if cls_name == "Transformer2DModel":
            with open(os.path.join(d, "config.json")) as f:
                assert json.load(f)["_class_name"] == "Transformer2DModel"
        n, nbytes = write_transformer_ref(name, loaded, labels, 500 + 10 * i)
        print("%s: %d tensors, %d bytes" % (name, n, nbytes))

    from diffusers.utils.torch_utils import randn_tensor
    b = Bundle(os.path.join(OUT, "dit_runs_ref"))
    meta = {}
    for name, (label, guidance, steps, seed, swap) in RUNS.items():
        image, sched = dit_run([label], guidance, steps, seed, swap)
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = {"label": label, "guidance": guidance, "steps": steps, "seed": seed,
                      "scheduler": sched}
    b.add("latents", randn_tensor((1, 4, 8, 8), generator=torch.Generator("cpu").manual_seed(0)))
    b.meta = {"capability": torch.backends.cpu.get_cpu_capability(), "runs": meta}
    n, nbytes = b.write()
    print("dit_runs: %d tensors, %d bytes" % (n, nbytes))
    total = 0
    for root, _, files in os.walk(OUT):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files
                     if f.startswith("dit") or "/dit" in root)
    print("dit fixtures: %d bytes" % total)


if __name__ == "__main__":
    main()
