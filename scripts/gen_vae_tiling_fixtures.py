#!/usr/bin/env python3
"""diffusers' tiled AutoencoderKL decode and encode (vae.enable_tiling()) on the committed tiny
VAE folders of gen_vae_fixtures.py, into tests/fixtures/diffusion/vae_tiling_ref.{json,bin}.

Per case (CASE = vae_kl, vae_variant) and tiling (`default`: the config's sample_size, or
`small`: tile_sample_min_size 8 with tile_latent_min_size 4 and overlap 0.25 for vae_kl's
factor 2, 2 and 0.5 for vae_variant's factor 4; `half`: the default sizes with overlap 0.5).
The sizes keep stride x factor = the crop, as diffusers' defaults do: with other sizes diffusers'
tiled output is not the image's size (Ember does the same arithmetic, so it would match):

  CASE_TILING_latents   [1, latent_channels, h, w] f32, larger than a latent tile, odd sizes
                        (the last tiles are cut short)
  CASE_TILING_decoded   vae.decode(latents).sample with tiling on
  CASE_TILING_image     [1, in_channels, H, W] f32, larger than an image tile (the last tiles
                        big enough for diffusers' unpadded stride-2 convs)
  CASE_TILING_mean, CASE_TILING_logvar
                        vae.encode(image).latent_dist with tiling on
  CASE_untiled_decoded  vae.decode of the default case's latents with tiling off, to show the
                        tiled result differs near the seams (as diffusers' does)

And a StableDiffusionPipeline run with the VAE tiled (`pipe.vae.enable_tiling()`) on the
committed tests/fixtures/diffusion/sd_tiny folder (gen_sd_fixtures.py) at 32 x 32, where the
16 x 16 latents are larger than its VAE's 8-pixel latent tiles:

  sd_tiled_latents      the initial latents, torch.Generator("cpu").manual_seed(3)
  sd_tiled_image        pipe("a photo of a cat", height=32, width=32, num_inference_steps=2,
                        guidance_scale=7.5, generator=manual_seed(3), output_type="np")

  sd_img2img_tiled_init, sd_img2img_tiled_image
                        StableDiffusionImg2ImgPipeline from the same components with the VAE
                        tiled: a seeded 32 x 32 init image (numpy default_rng(31)), "a photo of a
                        cat", strength 0.75, 4 steps, guidance 7.5, manual_seed(31): the init
                        image is encoded in tiles too (the script checks that this matters)

Ember must match within 1e-4 (the pipeline image within 1e-3). Run after gen_vae_fixtures.py and
gen_sd_fixtures.py (it reads their folders).
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")

# case: {tiling: (tile_sample_min_size, tile_latent_min_size, overlap) or None for the defaults,
#        latent (h, w), image (H, W)}
CASES = {
    "vae_kl": {"default": (None, (13, 11), (30, 20)), "small": ((8, 4, 0.25), (7, 9), (16, 22)),
               "half": ((16, 8, 0.5), (13, 11), (30, 20))},
    "vae_variant": {"default": (None, (7, 9), (21, 17)), "small": ((8, 2, 0.5), (5, 6), (16, 12))},
}


def main():
    import diffusers
    from diffusers import AutoencoderKL
    assert diffusers.__version__ == "0.42.1", diffusers.__version__
    torch.set_num_threads(1)
    b = Bundle(os.path.join(OUT, "vae_tiling_ref"))
    meta = {}
    for i, (name, tilings) in enumerate(CASES.items()):
        vae = AutoencoderKL.from_pretrained(os.path.join(OUT, name)).eval()
        cfg = vae.config
        g = torch.Generator().manual_seed(500 + i)
        for tname, (tiles, (h, w), (H, W)) in tilings.items():
            vae.enable_tiling()
            if tiles:
                vae.tile_sample_min_size, vae.tile_latent_min_size, vae.tile_overlap_factor = tiles
            else:
                tiles = (vae.tile_sample_min_size, vae.tile_latent_min_size,
                         vae.tile_overlap_factor)
            assert h > tiles[1] and H > tiles[0], "the inputs must be larger than a tile"
            latents = torch.randn((1, cfg.latent_channels, h, w), generator=g)
            image = torch.randn((1, cfg.in_channels, H, W), generator=g)
            with torch.no_grad():
                decoded = vae.decode(latents).sample
                dist = vae.encode(image).latent_dist
                vae.disable_tiling()
                untiled = vae.decode(latents).sample
                vae.tile_sample_min_size = cfg.sample_size
                vae.tile_latent_min_size = int(cfg.sample_size /
                                               (2 ** (len(cfg.block_out_channels) - 1)))
                vae.tile_overlap_factor = 0.25
            assert (decoded - untiled).abs().max() > 1e-3, "tiling changed nothing"
            p = f"{name}_{tname}_"
            for k, v in (("latents", latents), ("decoded", decoded), ("image", image),
                         ("mean", dist.mean), ("logvar", dist.logvar)):
                b.add(p + k, v.contiguous())
            if tname == "default":
                b.add(f"{name}_untiled_decoded", untiled.contiguous())
            meta[p[:-1]] = list(tiles)
    from diffusers import StableDiffusionPipeline
    pipe = StableDiffusionPipeline.from_pretrained(os.path.join(OUT, "sd_tiny"),
                                                   safety_checker=None,
                                                   requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    images = {}
    for tiled in (True, False):
        if tiled:
            pipe.vae.enable_tiling()
        else:
            pipe.vae.disable_tiling()
        latents = torch.randn((1, 4, 16, 16), generator=torch.Generator("cpu").manual_seed(3))
        with torch.no_grad():
            images[tiled] = pipe("a photo of a cat", height=32, width=32, num_inference_steps=2,
                                 guidance_scale=7.5, output_type="np",
                                 generator=torch.Generator("cpu").manual_seed(3)).images
    assert abs(images[True] - images[False]).max() > 1e-3, "the VAE tiling changed nothing"
    b.add("sd_tiled_latents", latents)
    b.add("sd_tiled_image", torch.from_numpy(images[True]))

    # image to image with the VAE tiled: the init image is encoded in tiles too (diffusers'
    # _encode tiles an image larger than tile_sample_min_size), not only the result decoded
    from diffusers import StableDiffusionImg2ImgPipeline
    i2i = StableDiffusionImg2ImgPipeline(**pipe.components)
    i2i.set_progress_bar_config(disable=True)
    i2i.vae.enable_tiling()
    init = np.random.default_rng(31).random((1, 32, 32, 3), dtype=np.float32)

    def img2img():
        with torch.no_grad():
            return i2i("a photo of a cat", image=init.copy(), strength=0.75, guidance_scale=7.5,
                       num_inference_steps=4, output_type="np",
                       generator=torch.Generator("cpu").manual_seed(31)).images
    tiled = img2img()
    encode = i2i.vae.encode  # the same run with only the encode untiled: it must differ

    def encode_untiled(*a, **k):
        i2i.vae.use_tiling = False
        try:
            return encode(*a, **k)
        finally:
            i2i.vae.use_tiling = True
    i2i.vae.encode = encode_untiled
    assert abs(tiled - img2img()).max() > 1e-3, "the tiled encode changed nothing"
    i2i.vae.encode = encode
    b.add("sd_img2img_tiled_init", torch.from_numpy(init))
    b.add("sd_img2img_tiled_image", torch.from_numpy(tiled))
    b.meta = {"tilings": meta}
    n, nbytes = b.write()
    print("vae_tiling_ref: %d tensors, %d bytes" % (n, nbytes))


if __name__ == "__main__":
    main()
