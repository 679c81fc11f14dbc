"""Peer figures for bench/lab_gemm.c: torch CPU matmul (f32, bf16) at 2048^3 and decode-shaped
bf16 linear, timed the same way (best of a few; LAB_CPUTIME=1: process CPU time / threads, which
discounts the slices other processes take on a shared machine).

    /opt/refvenv/bin/python bench/lab_torch.py [threads]
"""
import os
import sys
import time

import torch

threads = int(sys.argv[1]) if len(sys.argv) > 1 else os.cpu_count()
torch.set_num_threads(threads)
cputime = os.environ.get("LAB_CPUTIME", "0") == "1"


def clock():
    return time.process_time() / threads if cputime else time.perf_counter()


def best(fn, inner, reps=3):
    fn()
    t_best = 1e9
    for _ in range(reps):
        t = clock()
        for i in range(inner):
            fn(i)
        t_best = min(t_best, (clock() - t) / inner)
    return t_best


print(f"torch {torch.__version__}, {threads} threads, timing: "
      f"{'CPU time / threads' if cputime else 'wall'}")
s = 2048
for dt in (torch.float32, torch.bfloat16):
    a, b = torch.rand(s, s).to(dt), torch.rand(s, s).to(dt)
    t = best(lambda i=0: torch.matmul(a, b), 1, 5)
    print(f"torch matmul {str(dt)[6:]} {s}^3: {t * 1e3:.2f} ms, {2 * s ** 3 / t / 1e9:.1f} GFLOP/s")
k = 2048
for n in (768, 2048):
    wbytes = n * k * 2
    copies = (128 << 20) // wbytes + 1
    ws = [torch.randn(n, k).to(torch.bfloat16) for _ in range(copies)]
    for m in (1, 4, 16, 64):
        x = torch.randn(m, k).to(torch.bfloat16)
        inner = int(0.2 / (wbytes / 40e9 + 2.0 * m * n * k / 200e9)) + 1
        t = best(lambda i=0: torch.nn.functional.linear(x, ws[i % copies]), inner)
        print(f"torch linear bf16 M={m:<3} N={n:<5} K={k}: {t * 1e6:7.1f} us, "
              f"{wbytes / t / 1e9:6.1f} GB/s, {2 * m * n * k / t / 1e9:6.1f} GFLOP/s")
