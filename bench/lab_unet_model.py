#!/usr/bin/env python3
# google/ddpm-cifar10-32's UNet2DModel layout at 64x64, random weights; times torch eager too.
import sys, time, torch
from diffusers import UNet2DModel
torch.manual_seed(0)
u = UNet2DModel(sample_size=64, in_channels=3, out_channels=3, block_out_channels=(128, 256, 256, 256),
                layers_per_block=2, down_block_types=("DownBlock2D", "AttnDownBlock2D", "DownBlock2D", "DownBlock2D"),
                up_block_types=("UpBlock2D", "UpBlock2D", "AttnUpBlock2D", "UpBlock2D"),
                attention_head_dim=None, norm_num_groups=32).eval()
u.save_pretrained(sys.argv[1])
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
torch.set_num_threads(threads)
x = torch.randn(1, 3, 64, 64)
t = torch.tensor(500)
with torch.no_grad():
    u(x, t)
    best = 1e9
    for _ in range(int(sys.argv[3]) if len(sys.argv) > 3 else 3):
        t0 = time.perf_counter(); u(x, t); best = min(best, time.perf_counter() - t0)
print("torch %s eager, %d threads: best %.3f s, params %.1fM" % (torch.__version__, threads, best,
      sum(p.numel() for p in u.parameters()) / 1e6))
