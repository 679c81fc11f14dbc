"""Peer for `ember bench diffusion`: diffusers' UNet2DConditionModel on torch eager (CPU),
loaded from the same random-weight folder Ember times, on the same inputs, in each dtype asked
(f32, bf16: from_pretrained(torch_dtype=...), the inputs cast to it).

stdin: {"dir": DIR, "threads": N, "steps": N, "dtypes": ["bf16", "f32"] (default ["f32"]),
        "runs": [{"size": S, "inputs": FILE, "out": PREFIX}, ...],  # inputs: sample, timestep,
                                                                    # encoder_hidden_states
        "conv": [[N, C, H, W], ...],                                 # 3x3 convs, padding 1
        "group_norm": {"groups": G, "eps": E, "shapes": [[N, C, H, W], ...]},  # affine
        "attention": [[B, H, Tq, Tk, D], ...]}                       # F.sdpa, no mask
stdout, one JSON object per line ("ms" carries every value, as bench_peer_run reads it), per
dtype D (f32, bf16): {"name": "step_S_D", "ms": median wall ms of one forward},
  {"name": "step_cpu_S_D", "ms": median process CPU ms}; once: {"name": "flops_S", "ms": FLOPs
  that torch.utils.flop_counter counts in one forward}, {"name": "conv_N_C_H_W", "ms": median ms
  of F.conv2d in the first dtype}, {"name": "gn_N_C_H_W", "ms": median ms of F.group_norm in
  the first dtype, each call after a 256 MiB read (cold caches, as Ember's calls after its
  bandwidth probe)}, {"name": "attn_B_H_Tq_Tk_D", "ms": median ms of
  F.scaled_dot_product_attention in the first dtype}. The output of each dtype's first forward is written to
  PREFIX_D.safetensors ("sample", as f32) for Ember to compare.
Exits 3 when torch or diffusers cannot be imported.
"""
import json
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    from diffusers import UNet2DConditionModel
    from safetensors.torch import load_file, save_file
    from torch.utils.flop_counter import FlopCounterMode
except Exception as e:  # noqa: BLE001
    print(json.dumps({"unavailable": f"torch/diffusers: {e}"}))
    sys.exit(3)


DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def emit(name, v):
    print(json.dumps({"name": name, "ms": v}), flush=True)


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    task = json.load(sys.stdin)
    torch.set_num_threads(int(task["threads"]))
    steps = max(1, int(task["steps"]))
    torch.manual_seed(0)
    dtypes = task.get("dtypes") or ["f32"]
    for dn in dtypes if task.get("runs") else []:
        dt = DTYPES[dn]
        unet = UNet2DConditionModel.from_pretrained(task["dir"], torch_dtype=dt).eval()
        for run in task["runs"]:
            inp = load_file(run["inputs"])
            args = (inp["sample"].to(dt), inp["timestep"], inp["encoder_hidden_states"].to(dt))
            with torch.inference_mode():
                # the untimed warm-up counts the FLOPs and gives the output Ember compares with
                counter = FlopCounterMode(display=False)
                with counter:
                    out = unet(*args).sample
                save_file({"sample": out.float().contiguous()}, f"{run['out']}_{dn}.safetensors")
                if dn == dtypes[0]:
                    emit(f"flops_{run['size']}", float(counter.get_total_flops()))
                wall, cpu = [], []
                for _ in range(steps):
                    w0, c0 = time.perf_counter(), time.process_time()
                    unet(*args)
                    wall.append((time.perf_counter() - w0) * 1e3)
                    cpu.append((time.process_time() - c0) * 1e3)
            emit(f"step_{run['size']}_{dn}", median(wall))
            emit(f"step_cpu_{run['size']}_{dn}", median(cpu))
        del unet
    cdt = DTYPES[dtypes[0]]
    for n, c, h, w in task.get("conv", []):
        x = (torch.rand(n, c, h, w) * 2 - 1).to(cdt)
        wt = (torch.rand(c, c, 3, 3) * 2 - 1).to(cdt)
        b = torch.rand(c).to(cdt)
        with torch.inference_mode():
            F.conv2d(x, wt, b, padding=1)
            times, start = [], time.perf_counter()
            while len(times) < 3 or time.perf_counter() - start < 0.5:
                t0 = time.perf_counter()
                F.conv2d(x, wt, b, padding=1)
                times.append((time.perf_counter() - t0) * 1e3)
        emit(f"conv_{n}_{c}_{h}_{w}", median(times))
    gn = task.get("group_norm") or {}
    flush = torch.ones(64 << 20) if gn.get("shapes") else None  # 256 MiB: more than any L3
    for n, c, h, w in gn.get("shapes", []):
        x = (torch.randn(n, c, h, w) + 0.5).to(cdt)
        wt = (torch.rand(c) + 0.5).to(cdt)
        b = (torch.rand(c) * 0.2 - 0.1).to(cdt)
        with torch.inference_mode():
            F.group_norm(x, int(gn["groups"]), wt, b, float(gn["eps"]))
            times = []
            for _ in range(9):
                flush.sum()
                t0 = time.perf_counter()
                F.group_norm(x, int(gn["groups"]), wt, b, float(gn["eps"]))
                times.append((time.perf_counter() - t0) * 1e3)
        emit(f"gn_{n}_{c}_{h}_{w}", median(times))
    del flush
    for b, h, tq, tk, d in task.get("attention", []):
        q = torch.randn(b, h, tq, d).to(cdt)
        k = torch.randn(b, h, tk, d).to(cdt)
        v = torch.randn(b, h, tk, d).to(cdt)
        with torch.inference_mode():
            F.scaled_dot_product_attention(q, k, v)
            times, start = [], time.perf_counter()
            while len(times) < 3 or time.perf_counter() - start < 0.5:
                t0 = time.perf_counter()
                F.scaled_dot_product_attention(q, k, v)
                times.append((time.perf_counter() - t0) * 1e3)
        emit(f"attn_{b}_{h}_{tq}_{tk}_{d}", median(times))


if __name__ == "__main__":
    main()
