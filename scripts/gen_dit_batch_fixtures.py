#!/usr/bin/env python3
"""diffusers' DiTPipeline with a list of class labels and DDPM/DDIMPipeline with batch_size > 1.

Loads the committed tiny folders (not rewritten here): tests/fixtures/diffusion/dit_pipe
(gen_dit_fixtures.py) and ddpm_scale_shift / ddim_three (gen_diffusion_fixtures.py), and runs

  DiTPipeline(class_labels=[a, b, ...], generator=torch.manual_seed(seed)): the latents of all
    B = len(class_labels) images are one randn of [B, 4, 8, 8]; under guidance the transformer
    sees 2B rows (the labels, then B null classes 1000) and a noise-drawing scheduler (DDPM)
    draws its step noise over the 2B rows from torch's global generator (DiTPipeline passes no
    generator to scheduler.step; torch.manual_seed returns that generator, so latents and step
    noise share it, as in gen_dit_fixtures.py)
  DDPMPipeline / DDIMPipeline(batch_size=B, generator=torch.Generator("cpu").manual_seed(seed)):
    one randn of [B, C, H, W], per-step noise (DDPM, DDIM with eta > 0) over the batch

tests/fixtures/diffusion/dit_batch_ref.{json,bin} (a Bundle), per run (meta "runs" lists its
pipeline, labels or batch size, guidance, steps, eta, seed, scheduler):

  <run>_image   pipe(..., output_type="np").images: f32 [B, H, W, C]

Ember must match within 1e-3.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402
from gen_dit_fixtures import dit_run  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")

# DiT runs: name: (class labels, guidance_scale, steps, seed, scheduler swapped in or None)
DIT_RUNS = {
    "dit_cfg3": ([7, 3, 999], 4.0, 3, 5, None),
    "dit_nocfg2": ([500, 500], 1.0, 3, 6, None),
    "dit_ddpm2": ([11, 0], 2.5, 3, 9, "DDPMScheduler"),
}
# DDPM/DDIM runs: name: (folder, batch_size, steps, eta, seed)
UNCOND_RUNS = {
    "ddpm_b3": ("ddpm_scale_shift", 3, 4, 0.0, 21),
    "ddim_b2": ("ddim_three", 2, 4, 0.5, 22),
}


def main():
    import diffusers
    from diffusers import DiffusionPipeline
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    torch.set_num_threads(1)
    b = Bundle(os.path.join(OUT, "dit_batch_ref"))
    meta = {}
    for name, (labels, guidance, steps, seed, swap) in DIT_RUNS.items():
        image, sched = dit_run(labels, guidance, steps, seed, swap)
        assert image.shape[0] == len(labels)
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = {"pipeline": "DiTPipeline", "labels": labels, "guidance": guidance,
                      "steps": steps, "seed": seed, "scheduler": sched}
    for name, (folder, batch, steps, eta, seed) in UNCOND_RUNS.items():
        pipe = DiffusionPipeline.from_pretrained(os.path.join(OUT, folder))
        pipe.set_progress_bar_config(disable=True)
        kw = {"eta": eta} if type(pipe).__name__ == "DDIMPipeline" else {}
        image = pipe(batch_size=batch, generator=torch.Generator("cpu").manual_seed(seed),
                     num_inference_steps=steps, output_type="np", **kw).images
        assert image.shape[0] == batch
        b.add(name + "_image", torch.from_numpy(image))
        meta[name] = {"pipeline": type(pipe).__name__, "folder": folder, "batch_size": batch,
                      "steps": steps, "eta": eta, "seed": seed,
                      "scheduler": type(pipe.scheduler).__name__}
    b.meta = {"capability": torch.backends.cpu.get_cpu_capability(), "runs": meta}
    n, nbytes = b.write()
    print("dit_batch: %d tensors, %d bytes" % (n, nbytes))


if __name__ == "__main__":
    main()
