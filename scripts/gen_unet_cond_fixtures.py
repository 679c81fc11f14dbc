#!/usr/bin/env python3
"""Tiny random diffusers UNet2DConditionModel folders with diffusers' outputs on them.

For each case: a UNet2DConditionModel with random weights saved with save_pretrained
(config.json + diffusion_pytorch_model.safetensors) into tests/fixtures/diffusion/<name>/, and
in tests/fixtures/diffusion/<name>_ref.{json,bin} (a Bundle):

  sample          [2, in_channels, S, S] f32
  encoder_hidden_states  [2, 5, cross_attention_dim] f32
  t0, t1, t2      three timesteps (an i64 0-d tensor, an f32 0-d tensor, an i64 0-d tensor)
  out0..out2      unet(sample, t_k, encoder_hidden_states).sample
  tvec, out_vec   a timestep per sample ([2] i64) and its output

Ember must match within 1e-4 (f32).
"""
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402
from gen_diffusion_fixtures import randomise  # noqa: E402  (norms near identity, 0.15 elsewhere)

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")

CASES = {
    # Stable Diffusion 1.x's layout at a tiny width: conv proj_in/proj_out, attention_head_dim
    # an int (diffusers takes it as the head count), cross-attention blocks then a plain one
    "unet_cond": dict(sample_size=8, in_channels=4, out_channels=4,
                      down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                      up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
                      block_out_channels=(8, 16), layers_per_block=1, norm_num_groups=4,
                      cross_attention_dim=12, attention_head_dim=2),
    # Stable Diffusion 2.x's: linear projections, attention_head_dim a list, upcast_attention,
    # two transformer layers per block, three levels; other timestep settings
    "unet_cond_linear": dict(sample_size=8, in_channels=4, out_channels=3,
                             down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                                               "DownBlock2D"),
                             up_block_types=("UpBlock2D", "CrossAttnUpBlock2D",
                                             "CrossAttnUpBlock2D"),
                             block_out_channels=(8, 8, 8), layers_per_block=1,
                             norm_num_groups=4, cross_attention_dim=12,
                             attention_head_dim=[2, 2, 4], use_linear_projection=True,
                             upcast_attention=True, transformer_layers_per_block=2,
                             flip_sin_to_cos=False, freq_shift=1),
}


def write_case(name, cfg, seed):
    from diffusers import UNet2DConditionModel
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    unet = UNet2DConditionModel(**cfg).eval()
    randomise(unet, seed)
    unet.save_pretrained(d)
    b = Bundle(os.path.join(OUT, name + "_ref"))
    g = torch.Generator().manual_seed(seed + 1)
    s = cfg["sample_size"]
    sample = torch.randn((2, cfg["in_channels"], s, s), generator=g)
    ehs = torch.randn((2, 5, cfg["cross_attention_dim"]), generator=g)
    b.add("sample", sample)
    b.add("encoder_hidden_states", ehs)
    steps = [torch.tensor(999), torch.tensor(500.5), torch.tensor(1)]
    with torch.no_grad():
        for k, t in enumerate(steps):
            b.add("t%d" % k, t)
            b.add("out%d" % k, unet(sample, t, ehs).sample)
        tvec = torch.tensor([10, 700])
        b.add("tvec", tvec)
        b.add("out_vec", unet(sample, tvec, ehs).sample)
    b.meta = {"case": name}
    return b.write()


def main():
    import diffusers
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    torch.set_num_threads(1)
    for i, (name, cfg) in enumerate(CASES.items()):
        n, nbytes = write_case(name, cfg, 500 + 10 * i)
        print("%s: %d tensors, %d bytes" % (name, n, nbytes))


if __name__ == "__main__":
    main()
