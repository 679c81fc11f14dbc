#!/usr/bin/env python3
"""Tiny random diffusers pipelines (UNet2DModel) with diffusers' outputs on them.

For each case: a UNet2DModel with random weights, saved with save_pretrained as diffusers writes
it — a pipeline folder (model_index.json, unet/, scheduler/) for DDPMPipeline / DDIMPipeline
cases, a bare component folder (config.json + diffusion_pytorch_model.safetensors) for the
model-only cases — into tests/fixtures/diffusion/<name>/, and in
tests/fixtures/diffusion/<name>_ref.{json,bin} (a Bundle):

  sample          [2, C, H, W] f32 input
  t<k>            the timestep of forward k (0-d, int64 as the pipelines pass it; float for the
                  fourier embedding, which takes noise levels)
  out<k>          UNet2DModel(sample, t<k>).sample
  tvec, out_vec   one timestep per batch element and the output for it
  class_labels    (class-conditioned cases) the labels every forward above used
  latents, image  pipelines: the initial noise torch.randn draws from
                  torch.Generator("cpu").manual_seed(0), and the pipeline's image for it
                  (output_type="np", 10 steps; DDIM with eta=0 draws nothing more, so its image
                  is a function of the latents; DDPM also draws per-step noise from the same
                  generator)

Ember must match the UNet outputs within 1e-4 and the images within 1e-3.

tests/fixtures/diffusion/pipeline_runs_ref.{json,bin} (a Bundle) holds seeded runs of the
committed pipeline folders above, loaded back with from_pretrained: for each run <r> of RUNS,
<r>_image (1, H, W, C) f32 for torch.Generator("cpu").manual_seed(seed), and the run's folder,
steps, eta, seed and scheduler in meta.runs. Runs whose scheduler is the folder's own are the
pipeline's __call__ itself (DDPM's per-step noise and DDIM's eta > 0 noise drawn from the same
generator); a swapped scheduler (Class.from_config(pipe.scheduler.config)) runs the denoising
loop diffusers documents for schedulers, with scale_model_input and init_noise_sigma (the
DDPMPipeline loop skips both, which only DDPM/DDIM-type schedulers can do without).
"""
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")


# the variants at half the width of ddpm_attn, to keep the committed weights small
SMALL = dict(block_out_channels=(4, 8), norm_num_groups=2, attention_head_dim=2)


def base(small=False, **kw):
    cfg = dict(sample_size=16, in_channels=3, out_channels=3, block_out_channels=(8, 16),
               layers_per_block=1, down_block_types=("DownBlock2D", "AttnDownBlock2D"),
               up_block_types=("AttnUpBlock2D", "UpBlock2D"), norm_num_groups=4,
               attention_head_dim=4)
    if small:
        cfg.update(SMALL)
    cfg.update(kw)
    return cfg


# name: (pipeline class or None, UNet2DModel config, timesteps, class labels)
CASES = {
    # the layout of google/ddpm-*: attention at the low resolution, defaults elsewhere
    "ddpm_attn": ("DDPMPipeline", base(), (0, 500, 999), None),
    # scale_shift resnets (so no group norm in the mid block's attention), sin before cos,
    # freq_shift 1, padding 0 downsamplers (F.pad then conv), two layers per block, input
    # centring, a mid block scale factor, one head per attention layer
    "ddpm_scale_shift": ("DDPMPipeline",
                         base(True, sample_size=8, in_channels=1, out_channels=1,
                              layers_per_block=2,
                              down_block_types=("AttnDownBlock2D", "DownBlock2D"),
                              up_block_types=("UpBlock2D", "AttnUpBlock2D"),
                              resnet_time_scale_shift="scale_shift", flip_sin_to_cos=False,
                              freq_shift=1, downsample_padding=0, center_input_sample=True,
                              norm_eps=1e-6, mid_block_scale_factor=1.4142135,
                              attention_head_dim=None),
                         (0, 500, 999), None),
    # three levels, no attention in the mid block, a wider time embedding
    "ddim_three": ("DDIMPipeline",
                   base(True, block_out_channels=(4, 8, 8),
                        down_block_types=("DownBlock2D", "AttnDownBlock2D", "AttnDownBlock2D"),
                        up_block_types=("AttnUpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
                        add_attention=False, time_embedding_dim=24),
                   (0, 500, 999), None),
    # class labels (an embedding table), learned time embedding, gelu, no mid block
    "unet_class": (None,
                   base(True, sample_size=8, num_class_embeds=5, time_embedding_type="learned",
                        num_train_timesteps=1000, act_fn="gelu", mid_block_type=None),
                   (0, 500, 999), [1, 4]),
    # Gaussian Fourier time embedding (noise levels, output divided by them), resnet
    # down/upsamplers (average pooling, nearest upsampling inside a resnet), labels embedded
    # as timesteps, the mid block's attention with its own norm groups
    "unet_fourier": (None,
                     base(True, sample_size=8, time_embedding_type="fourier", downsample_type="resnet",
                          upsample_type="resnet",
                          down_block_types=("AttnDownBlock2D", "AttnDownBlock2D"),
                          up_block_types=("AttnUpBlock2D", "AttnUpBlock2D"),
                          class_embed_type="timestep", attn_norm_num_groups=1),
                     (0.02, 0.5, 80.0), [0.3, 7.0]),
}


def randomise(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.2)  # affine away from id
            elif name.endswith("time_proj.weight") and model.config.time_embedding_type == "fourier":
                p.normal_(0.0, 1.0)
            else:
                p.normal_(0.0, 0.15)


def timestep(t):
    first = t[0] if isinstance(t, list) else t
    return torch.tensor(t, dtype=torch.float32 if isinstance(first, float) else torch.int64)


def write_case(name, pipe_cls, cfg, steps, labels, seed):
    from diffusers import DDIMPipeline, DDIMScheduler, DDPMPipeline, DDPMScheduler, UNet2DModel
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    unet = UNet2DModel(**cfg).eval()
    randomise(unet, seed)
    b = Bundle(os.path.join(OUT, name + "_ref"))
    g = torch.Generator().manual_seed(seed + 1)
    size = cfg["sample_size"]
    sample = torch.randn((2, cfg["in_channels"], size, size), generator=g)
    b.add("sample", sample)
    cl = None
    if labels is not None:
        cl = torch.tensor(labels, dtype=torch.float32 if isinstance(labels[0], float) else torch.int64)
        b.add("class_labels", cl)
    with torch.no_grad():
        for k, t in enumerate(steps):
            tt = timestep(t)
            b.add("t%d" % k, tt)
            b.add("out%d" % k, unet(sample, tt, class_labels=cl).sample)
        tvec = timestep([steps[0], steps[2]] if isinstance(steps[0], float) else [10, 700])
        b.add("tvec", tvec)
        b.add("out_vec", unet(sample, tvec, class_labels=cl).sample)
    b.meta = {"case": name, "pipeline": pipe_cls or "none", "steps": len(steps)}
    if pipe_cls is None:
        unet.save_pretrained(d)
    else:
        if pipe_cls == "DDPMPipeline":
            pipe = DDPMPipeline(unet=unet, scheduler=DDPMScheduler(num_train_timesteps=1000))
            kw = {}
        else:
            pipe = DDIMPipeline(unet=unet, scheduler=DDIMScheduler(num_train_timesteps=1000))
            kw = {"eta": 0.0}
        pipe.set_progress_bar_config(disable=True)
        pipe.save_pretrained(d)
        shape = (1, cfg["in_channels"], size, size)
        latents = torch.randn(shape, generator=torch.Generator("cpu").manual_seed(0))
        image = pipe(generator=torch.Generator("cpu").manual_seed(0), num_inference_steps=10,
                     output_type="np", **kw).images
        b.add("latents", latents)
        b.add("image", torch.from_numpy(image))
        b.meta["inference_steps"] = 10
        if pipe_cls == "DDIMPipeline":
            # the run is a function of the latents: redo it from them to prove it
            sched = DDIMScheduler.from_config(pipe.scheduler.config)
            sched.set_timesteps(10)
            x = latents
            with torch.no_grad():
                for t in sched.timesteps:
                    x = sched.step(unet(x, t).sample, t, x, eta=0.0).prev_sample
            again = (x / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).numpy()
            assert abs(again - image).max() == 0.0, "DDIM image is not a function of its latents"
    n, nbytes = b.write()
    return n, nbytes


# name: (folder, steps, eta, seed, scheduler class swapped in or None)
RUNS = {
    "ddpm_seeded": ("ddpm_attn", 12, 0.0, 1234, None),
    "ddpm_seeded_small": ("ddpm_scale_shift", 7, 0.0, 99, None),
    "ddim_eta": ("ddim_three", 8, 0.5, 5, None),
    "ddim_eta1_seeded": ("ddim_three", 5, 1.0, 77, None),
    "ddpm_as_ddim": ("ddpm_attn", 10, 0.0, 3, "DDIMScheduler"),
    "ddpm_as_euler": ("ddpm_attn", 10, 0.0, 3, "EulerDiscreteScheduler"),
    "ddpm_as_euler_a": ("ddpm_scale_shift", 6, 0.0, 11, "EulerAncestralDiscreteScheduler"),
}


def write_runs():
    import diffusers
    from diffusers import DiffusionPipeline
    from diffusers.utils.torch_utils import randn_tensor
    b = Bundle(os.path.join(OUT, "pipeline_runs_ref"))
    meta = {}
    for name, (folder, steps, eta, seed, swap) in RUNS.items():
        pipe = DiffusionPipeline.from_pretrained(os.path.join(OUT, folder))
        pipe.set_progress_bar_config(disable=True)
        g = torch.Generator("cpu").manual_seed(seed)
        kw = {"eta": eta} if type(pipe).__name__ == "DDIMPipeline" else {}
        if swap is None:
            image = pipe(generator=g, num_inference_steps=steps, output_type="np", **kw).images
        else:
            sched = getattr(diffusers, swap).from_config(pipe.scheduler.config)
            unet = pipe.unet
            size = unet.config.sample_size
            x = randn_tensor((1, unet.config.in_channels, size, size), generator=g,
                             dtype=unet.dtype)
            # as the Stable Diffusion pipelines: the scale is the schedule's, after set_timesteps
            sched.set_timesteps(steps)
            x = x * sched.init_noise_sigma
            with torch.no_grad():
                for t in sched.timesteps:
                    eps = unet(sched.scale_model_input(x, t), t).sample
                    x = sched.step(eps, t, x, generator=g).prev_sample
            image = (x / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1).numpy()
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = {"folder": folder, "steps": steps, "eta": eta, "seed": seed,
                      "scheduler": swap or type(pipe.scheduler).__name__}
    b.meta = {"capability": torch.backends.cpu.get_cpu_capability(), "runs": meta}
    return b.write()


def main():
    import diffusers
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    for i, (name, (pipe_cls, cfg, steps, labels)) in enumerate(CASES.items()):
        n, nbytes = write_case(name, pipe_cls, cfg, steps, labels, 100 + 10 * i)
        print("%s: %d tensors, %d bytes" % (name, n, nbytes))
    n, nbytes = write_runs()
    print("pipeline_runs: %d tensors, %d bytes" % (n, nbytes))
    total = 0
    for root, _, files in os.walk(OUT):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print("tests/fixtures/diffusion: %d bytes" % total)


if __name__ == "__main__":
    main()
