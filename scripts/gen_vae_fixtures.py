#!/usr/bin/env python3
"""Tiny random diffusers AutoencoderKL folders with diffusers' outputs on them.

For each case: an AutoencoderKL with random weights saved with save_pretrained (config.json +
diffusion_pytorch_model.safetensors) into tests/fixtures/diffusion/<name>/, and in
tests/fixtures/diffusion/<name>_ref.{json,bin} (a Bundle):

  image     [2, in_channels, H, W] f32 input of encode
  mean      vae.encode(image).latent_dist.mean
  logvar    vae.encode(image).latent_dist.logvar (clamped to [-30, 20] as diffusers does)
  noise     torch.randn of the latent shape from torch.Generator("cpu").manual_seed(7)
  sample    vae.encode(image).latent_dist.sample(generator=torch.Generator("cpu").manual_seed(7))
            (= mean + exp(0.5 logvar) * noise, checked here)
  latents   [2, latent_channels, H/f, W/f] f32 input of decode
  decoded   vae.decode(latents).sample (the caller divides by scaling_factor first, as the
            pipelines do; the fixture's latents are already "unscaled")
  image_odd, mean_odd, logvar_odd
            encode of a [1, in_channels, H - 1, H - 3] image: odd sizes through the padded
            stride-2 downsamplers

Ember must match within 1e-4.
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

# name: (AutoencoderKL config, image size)
CASES = {
    # Stable Diffusion's layout at a tiny width: two levels, quant convs, mid-block attention
    "vae_kl": (dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                    up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16),
                    layers_per_block=1, latent_channels=4, norm_num_groups=4, sample_size=16,
                    scaling_factor=0.18215), 16),
    # three levels, two layers per block, no quant convs, no mid-block attention, gelu resnets,
    # a shift factor (SD3/Flux style metadata), other channel counts
    "vae_variant": (dict(in_channels=1, out_channels=2,
                         down_block_types=("DownEncoderBlock2D",) * 3,
                         up_block_types=("UpDecoderBlock2D",) * 3, block_out_channels=(4, 8, 8),
                         layers_per_block=2, latent_channels=2, norm_num_groups=2, sample_size=16,
                         act_fn="gelu", scaling_factor=1.5305, shift_factor=0.0609,
                         force_upcast=False, use_quant_conv=False, use_post_quant_conv=False,
                         mid_block_add_attention=False), 12),
}


def write_case(name, cfg, size, seed):
    from diffusers import AutoencoderKL
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    vae = AutoencoderKL(**cfg).eval()
    randomise(vae, seed)
    vae.save_pretrained(d)
    b = Bundle(os.path.join(OUT, name + "_ref"))
    g = torch.Generator().manual_seed(seed + 1)
    f = 2 ** (len(cfg["block_out_channels"]) - 1)
    image = torch.randn((2, cfg["in_channels"], size, size), generator=g)
    latents = torch.randn((2, cfg["latent_channels"], size // f, size // f), generator=g)
    with torch.no_grad():
        dist = vae.encode(image).latent_dist
        sample = dist.sample(generator=torch.Generator("cpu").manual_seed(7))
        noise = torch.randn(dist.mean.shape, generator=torch.Generator("cpu").manual_seed(7))
        again = dist.mean + torch.exp(0.5 * dist.logvar) * noise
        assert (again - sample).abs().max() == 0.0, "sample is not mean + std * noise"
        decoded = vae.decode(latents).sample
        image_odd = torch.randn((1, cfg["in_channels"], size - 1, size - 3), generator=g)
        dist_odd = vae.encode(image_odd).latent_dist
    for k, v in (("image", image), ("mean", dist.mean), ("logvar", dist.logvar),
                 ("noise", noise), ("sample", sample), ("latents", latents),
                 ("decoded", decoded), ("image_odd", image_odd), ("mean_odd", dist_odd.mean),
                 ("logvar_odd", dist_odd.logvar)):
        b.add(k, v.contiguous())
    b.meta = {"case": name}
    return b.write()


def main():
    import diffusers
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    torch.set_num_threads(1)
    for i, (name, (cfg, size)) in enumerate(CASES.items()):
        n, nbytes = write_case(name, cfg, size, 300 + 10 * i)
        print("%s: %d tensors, %d bytes" % (name, n, nbytes))


if __name__ == "__main__":
    main()
