#!/usr/bin/env python3
"""Small PNGs written by Pillow and the pixels diffusers' image processor makes of them.

tests/fixtures/png/{rgb,rgba,gray,palette}.png: seeded random 5 x 7 images in four colour types
(8-bit RGB, RGBA with varied alpha, grayscale, a 16-colour palette). tests/fixtures/png_ref
.{json,bin} (a Bundle): for each, np.array(img.convert("RGB")).astype(np.float32) / 255 — what
VaeImageProcessor.pil_to_numpy gives an img2img pipeline — f32 [5, 7, 3]. em_png_read must give
these values exactly.
"""
import os
import sys

import numpy as np
import torch
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures")


def main():
    rng = np.random.default_rng(20261203)
    h, w = 5, 7
    imgs = {
        "rgb": Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB"),
        "rgba": Image.fromarray(rng.integers(0, 256, (h, w, 4), dtype=np.uint8), "RGBA"),
        "gray": Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L"),
    }
    pal = Image.fromarray(rng.integers(0, 16, (h, w), dtype=np.uint8), "P")
    pal.putpalette(list(rng.integers(0, 256, 16 * 3, dtype=np.uint8)))
    imgs["palette"] = pal
    os.makedirs(os.path.join(OUT, "png"), exist_ok=True)
    b = Bundle(os.path.join(OUT, "png_ref"))
    for name, img in imgs.items():
        path = os.path.join(OUT, "png", name + ".png")
        img.save(path)
        back = Image.open(path)
        pixels = np.array(back.convert("RGB")).astype(np.float32) / 255.0
        b.add(name, torch.from_numpy(pixels))
    n, nbytes = b.write()
    print("png_ref: %d tensors, %d bytes" % (n, nbytes))


if __name__ == "__main__":
    main()
