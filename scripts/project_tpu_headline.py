#!/usr/bin/env python3
"""The announcement's headline on a TPU slice Ember has never run on, from XLA's cost model.

Usage: project_tpu_headline.py EMBER [--topology v6e:2x4] [--degree 8] [--batches 1,16,64]
                               [--latency-us 10] [--cache DIR]

Qwen3-30B-A3B (its real dimensions and 48 layers, random bf16 weights) decoding over the N chips
of a slice with Ember's tensor-parallel plan (moe_tp_experts: every chip a 1/N slice of every
expert; attention heads split, KV heads replicated below N; the LM head's vocabulary split):

1. `ember make-checkpoint --preset qwen3-30b-a3b --layers 48 --tp-shard N`: one chip's shard as a
   model of its own (7.7 GB at N = 8), written once into --cache;
2. `ember bench decode --device tpu-aot:TOPOLOGY`: its compiled decode step compiled by libtpu for
   one chip of the slice: XLA's flops and bytes accessed, the program's peak memory;
3. `ember project tp`: the same shard's bytes from the model's arithmetic (only the experts a
   batch hits, under uniform routing) and the step's 2 L + 2 collectives over the chip's ICI
   (a latency per call, an assumption, plus the ring transfer).

XLA's cost model counts a ragged dot's whole right-hand side as accessed, every expert hit or not
(docs/tpu-aot.md): the raw roofline is printed, and the corrected one takes the bytes from step 3
with XLA's flops. Step time = corrected roofline + collectives; nothing is measured on a TPU.
Needs the TPU plugin (EMBER_PJRT_TPU_PLUGIN, scripts/test.sh installs libtpu) and ~8 GB of disk.
"""
import argparse
import json
import os
import subprocess
import sys


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-3000:]}")
    return [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ember")
    ap.add_argument("--topology", default="v6e:2x4")
    ap.add_argument("--degree", type=int, default=8)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--latency-us", default="10")
    ap.add_argument("--cache", default="build/bench-models")
    a = ap.parse_args()
    gen = a.topology.split(":")[0]
    shard = os.path.join(a.cache, f"qwen3-30b-a3b-48l-tp{a.degree}-shard")
    if not os.path.exists(os.path.join(shard, "config.json")):
        os.makedirs(a.cache, exist_ok=True)
        run([a.ember, "make-checkpoint", "--preset", "qwen3-30b-a3b", "--layers", "48",
             "--tp-shard", str(a.degree), "--out", shard])
    xla = {r["batch"]: r for r in run([a.ember, "bench", "decode", "--device",
                                        f"tpu-aot:{a.topology}", "--model", shard, "--batches",
                                        a.batches, "--skip-peers", "--json"])
           if r.get("bench") == "decode"}
    # bench decode compiles the step for a KV bucket of 128 positions
    plan = {r["batch"]: r for r in run([a.ember, "project", "tp", "--shape", "qwen3-30b-a3b",
                                        "--degrees", str(a.degree), "--batches", a.batches,
                                        "--context", "128", "--devices", f"tpu-{gen}",
                                        "--latency-us", a.latency_us, "--json"])}
    print(f"Qwen3-30B-A3B decode on a TPU {a.topology} slice, tensor parallel over {a.degree} "
          f"chips (moe_tp_experts), per chip, projected from libtpu's compile (not measured); "
          f"collectives {a.latency_us} us per call + ring transfer over ICI")
    print("| batch | XLA GFLOP | XLA GB accessed | XLA roofline ms | GB read (hit experts) | "
          "roofline ms | collectives ms | step ms | tokens/s | peak GB per chip | fits |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for b in sorted(xla):
        x, p = xla[b], plan[b]
        t = max(x["flops"] / (p["bf16_tflops"] * 1e12), p["read_bytes_per_step"] /
                (p["hbm_gbs"] * 1e9))
        step = t + p["t_collectives_s"]
        print(f"| {b} | {x['flops'] / 1e9:.2f} | {x['bytes_accessed'] / 1e9:.2f} | "
              f"{x['roofline_ms']:.2f} | {p['read_bytes_per_step'] / 1e9:.2f} | {t * 1e3:.2f} | "
              f"{p['t_collectives_s'] * 1e3:.2f} | {step * 1e3:.2f} | {b / step:.0f} | "
              f"{x['peak_bytes'] / 1e9:.2f} | {'yes' if x['fits_hbm'] else 'NO'} |")


if __name__ == "__main__":
    main()
