"""Peer figures for bench/lab_gemm.c: torch CPU matmul (f32, bf16) at 2048^3 and decode-shaped
bf16 linear, timed the same way: samples of `inner` calls, best per call, by the wall clock and
by the process's CPU time divided by the thread count.

    /opt/refvenv/bin/python bench/lab_torch.py [threads]
"""
import os
import sys
import time

import torch

threads = int(sys.argv[1]) if len(sys.argv) > 1 else os.cpu_count()
torch.set_num_threads(threads)


def measure(fn, reps, inner=1):
    fn(0)
    wall = cpu = 1e30
    for r in range(reps):
        w, c = time.perf_counter(), time.process_time()
        for i in range(inner):
            fn(r * inner + i)
        cpu = min(cpu, (time.process_time() - c) / threads / inner)
        wall = min(wall, (time.perf_counter() - w) / inner)
    return wall, cpu


print(f"torch {torch.__version__}, {threads} threads")
s = 2048
fl = 2.0 * s ** 3
for dt in (torch.float32, torch.bfloat16):
    a, b = torch.rand(s, s).to(dt), torch.rand(s, s).to(dt)
    w, c = measure(lambda i: torch.matmul(a, b), 8)
    print(f"matmul {str(dt)[6:]:8} {s}^3 torch: {w * 1e6:9.1f} us wall ({fl / w / 1e9:6.1f} GFLOP/s), "
          f"{c * 1e6:9.1f} us CPU ({fl / c / 1e9:6.1f} GFLOP/s)")
k = 2048
for n in (768, 2048):
    wbytes = n * k * 2
    copies = (128 << 20) // wbytes + 1
    ws = [torch.randn(n, k).to(torch.bfloat16) for _ in range(copies)]
    for m in (1, 4, 16, 64):
        x = torch.randn(m, k).to(torch.bfloat16)
        fl = 2.0 * m * n * k
        inner = int(0.01 / (wbytes / 40e9 + fl / 200e9)) + 1
        w, c = measure(lambda i: torch.nn.functional.linear(x, ws[i % copies]), 30, inner)
        print(f"linear bf16 M={m:<3} N={n:<5} K={k} torch: {w * 1e6:8.1f} us wall "
              f"({fl / w / 1e9:6.1f} GFLOP/s, {wbytes / w / 1e9:5.1f} GB/s), {c * 1e6:8.1f} us CPU "
              f"({fl / c / 1e9:6.1f} GFLOP/s)")
