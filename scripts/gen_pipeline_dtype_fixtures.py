#!/usr/bin/env python3
"""diffusers' pipelines loaded with torch_dtype=torch.bfloat16 and torch.float16, on the tiny
pipeline folders of the other diffusion fixtures (not rewritten here; SD3 with
max_sequence_length 8).

For each run the initial latents are one torch.randn (f32, torch.Generator("cpu").manual_seed(seed))
rounded to the pipeline's dtype and passed as latents= (diffusers draws a half-precision randn on
its own path, and the C test gives the same values to Ember as f32), with schedulers that draw no
per-step noise (PNDM, DDIM with eta 0, Euler, DPM-Solver++), so the runs depend on the dtype only.
Each run is also made in f32 from the same (rounded) latents: the gap between the two is how far
half precision itself moves the image, the scale the C test's tolerance is set against.

tests/fixtures/diffusion/pipeline_dtype_ref.{json,bin} (a Bundle), per run:

  <run>_latents  the initial latents as f32 (values of the run's dtype) [1, C, h, w]
  <run>_image    pipe(..., output_type="np").images in the run's dtype, as f32 [1, H, W, 3]
  <run>_f32      the same run in f32

meta "runs": folder, pipeline class, dtype, scheduler, prompt, guidance, steps, seed, size, and
"gap_to_f32" (max |image - f32 image|), also as the top-level "<run>_gap".
"""
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")

# name: (folder, dtype, scheduler class or None (the folder's), prompt / class label, guidance,
#        steps, seed, size (pixels; None: the folder's))
RUNS = {
    "sd_bf16": ("sd_tiny", "bf16", None, "a photo of a cat", 7.5, 3, 3, 16),
    "sd_f16": ("sd_tiny", "f16", "EulerDiscreteScheduler", "a red cube", 5.0, 4, 5, 16),
    "sdxl_bf16": ("sdxl_tiny", "bf16", None, "an astronaut", 5.0, 3, 7, 16),
    "sdxl_f16": ("sdxl_tiny", "f16", "DPMSolverMultistepScheduler", "a dog", 5.0, 3, 8, 16),
    "dit_bf16": ("dit_pipe", "bf16", None, 1, 4.0, 3, 11, None),
    "ddim_f16": ("ddim_three", "f16", None, None, None, 3, 13, None),
    "sd3_bf16": ("sd3_tiny", "bf16", None, "a photo of a cat", 5.0, 3, 17, 16),
}
DT = {"bf16": torch.bfloat16, "f16": torch.float16}


def run(folder, dtype, cls, cond, guidance, steps, seed, size):
    import diffusers
    from diffusers import DiffusionPipeline
    extra = {"sd_tiny": {"safety_checker": None},
             "sd3_tiny": {"text_encoder_3": None, "tokenizer_3": None}}.get(folder, {})
    pipe = DiffusionPipeline.from_pretrained(os.path.join(OUT, folder), torch_dtype=dtype,
                                             **extra)
    if folder == "sd3_tiny":
        # from_pretrained(torch_dtype=...) leaves the SD3 transformer's pos_embed in f32
        # (_skip_layerwise_casting_patterns), and its patch conv then refuses a half input on
        # the CPU: cast the whole pipeline, as pipe.to(dtype) does
        pipe.to(dtype)
    pipe.set_progress_bar_config(disable=True)
    if cls:
        pipe.scheduler = getattr(diffusers, cls).from_config(pipe.scheduler.config)
    name = type(pipe).__name__
    if name == "DiTPipeline":
        t = pipe.transformer.config
        shape = (1, t.in_channels, t.sample_size, t.sample_size)
    elif name in ("DDIMPipeline", "DDPMPipeline"):
        u = pipe.unet.config
        shape = (1, u.in_channels, u.sample_size, u.sample_size)
    else:
        f = 2 ** (len(pipe.vae.config.block_out_channels) - 1)
        den = pipe.transformer if name == "StableDiffusion3Pipeline" else pipe.unet
        shape = (1, den.config.in_channels, size // f, size // f)
    latents = torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed))
    return pipe, name, latents


def main():
    import diffusers
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    torch.set_num_threads(1)
    b = Bundle(os.path.join(OUT, "pipeline_dtype_ref"))
    meta = {}
    for rname, (folder, dts, cls, cond, guidance, steps, seed, size) in RUNS.items():
        images = {}
        for dt in (DT[dts], torch.float32):
            pipe, name, latents = run(folder, dt, cls, cond, guidance, steps, seed, size)
            latents = latents.to(DT[dts])  # the half-precision values, for both runs
            g = torch.Generator("cpu").manual_seed(seed)
            with torch.no_grad():
                if name == "DiTPipeline":
                    # DiTPipeline draws its own latents: patch randn_tensor for this call
                    import diffusers.pipelines.dit.pipeline_dit as mod
                    keep = mod.randn_tensor
                    mod.randn_tensor = lambda shape, generator=None, device=None, dtype=None: \
                        latents.to(dtype)
                    try:
                        out = pipe(class_labels=[cond], guidance_scale=guidance,
                                   num_inference_steps=steps, generator=g, output_type="np")
                    finally:
                        mod.randn_tensor = keep
                elif name == "DDIMPipeline":
                    import diffusers.pipelines.ddim.pipeline_ddim as mod
                    keep = mod.randn_tensor
                    mod.randn_tensor = lambda shape, generator=None, device=None, dtype=None: \
                        latents.to(dtype)
                    try:
                        out = pipe(num_inference_steps=steps, eta=0.0, generator=g,
                                   output_type="np")
                    finally:
                        mod.randn_tensor = keep
                else:
                    kw = {"max_sequence_length": 8} if name == "StableDiffusion3Pipeline" else {}
                    out = pipe(cond, guidance_scale=guidance, num_inference_steps=steps,
                               height=size, width=size, latents=latents.to(dt), generator=g,
                               output_type="np", **kw)
            images[dt] = np.asarray(out.images, dtype=np.float32)
        gap = float(np.abs(images[DT[dts]] - images[torch.float32]).max())
        b.add(rname + "_latents", latents.float())
        b.add(rname + "_image", torch.from_numpy(images[DT[dts]]))
        b.add(rname + "_f32", torch.from_numpy(images[torch.float32]))
        meta[rname] = {"folder": folder, "pipeline": name, "dtype": dts,
                       "scheduler": type(pipe.scheduler).__name__, "cond": cond,
                       "guidance": guidance, "steps": steps, "seed": seed, "size": size,
                       "gap_to_f32": gap}
        print(rname, name, type(pipe.scheduler).__name__, "gap", gap, flush=True)
    b.meta = {"runs": meta, **{k + "_gap": v["gap_to_f32"] for k, v in meta.items()}}
    count, nbytes = b.write()
    print("pipeline_dtype_ref: %d tensors, %d bytes" % (count, nbytes))


if __name__ == "__main__":
    main()
