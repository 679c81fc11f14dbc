#!/usr/bin/env python3
"""The announcement's headline on a TPU slice Ember has never run on, from XLA's cost model.

Usage: project_tpu_headline.py EMBER [--topology v6e:2x4] [--degree 8] [--batches 1,16,64]
                               [--models qwen3,gemma4] [--latency-us 10]
                               [--launch-us 6|measure] [--sync-us 110] [--sensitivity 0,2,20]
                               [--no-whole-step] [--cache DIR] [--spmd]

Qwen3-30B-A3B (48 layers) and Gemma 4 26B-A4B (30 layers), their real dimensions with random bf16
weights, decoding over the N chips of a slice with Ember's tensor-parallel plan (moe_tp_experts:
every chip a 1/N slice of every expert; attention heads split, KV heads replicated below N; the
LM head's vocabulary split), two ways:

* ragged: Ember's compiled step (one program, the ragged dots, routing on the device);
* loop: the per-expert loop as transformers runs it eagerly: per layer one program per op per hit
  expert and one device-to-host sync for the routing.

What each number comes from:

1. `ember project tp --shape S --json`: the chip's bytes and flops per step from the model's
   arithmetic (only the experts a batch hits, under uniform routing), split into the routed
   blocks (router + experts: `moe_*` fields) and the rest, and the step's collectives over the
   chip's ICI (--latency-us per call, an assumption, plus the ring transfer);
2. `ember bench moe --device tpu-aot:TOPOLOGY --tp-shard N --json`: one MoE layer as one chip
   holds it, compiled by libtpu: the loop's programs, XLA's roofline of each and the overheads
   (--launch-us per program, --sync-us per routing read), and the ragged layer's XLA flops;
3. unless --no-whole-step: `ember make-checkpoint --preset S --layers L --tp-shard N` (one chip's
   shard as a model: 7.7 GB for Qwen3, 6.3 GB for Gemma 4, written once into --cache) and `ember
   bench decode --device tpu-aot:TOPOLOGY`: the whole step compiled by libtpu (XLA's flops and
   bytes accessed, peak memory).
4. with --spmd: `ember make-checkpoint --shape-only` (the header, no data) and `ember bench
   decode --spmd N --spmd-split-gate-up`: the WHOLE model compiled as one SPMD program over the
   N chips (libtpu's partitioner inserts the collectives), its per-chip XLA figures and
   collectives printed beside the composed shard's (not used by the composition).

The composition (compose() below; tests/check_project_tp.py checks it without libtpu):
  rest   = max(rest flops / peak, rest bytes / HBM bandwidth)    (attention, norms, dense MLPs,
           embedding, LM head, KV cache: identical in both, counted as compiled, no launches)
  ragged = whole step: max(XLA flops / peak, bytes a step must read / bandwidth) + collectives
           (composed:  rest + L x max(XLA flops of the ragged layer / peak, its bytes / bandwidth)
                       + collectives, printed beside it, and used with --no-whole-step)
  loop   = rest + L x (sum of the loop's programs' rooflines + programs x launch + 1 sync)
           + collectives
XLA's cost model counts a ragged dot's whole right-hand side as accessed, every expert hit or not,
and then some (docs/tpu-aot.md): the ragged bytes are the arithmetic's, XLA's flops are kept.
The launch and sync defaults, 6 us and 110 us, are the overheads measured on XLA's CPU plugin
(xla:0) on 2026-12-01 (docs/notes/2026-12-01-tpu-aot.md); `--launch-us measure` lets `ember bench
moe` measure them on xla:0 now. Nothing here is measured on a TPU. Needs the TPU plugin
(EMBER_PJRT_TPU_PLUGIN; scripts/test.sh installs libtpu), and ~14 GB of disk for step 3.
"""
import argparse
import json
import os
import subprocess
import sys

SHAPES = {"qwen3": "qwen3-30b-a3b", "gemma4": "gemma4-26b-a4b"}
LAYERS = {"qwen3": 48, "gemma4": 30}
# the announcement (Hugging Face, Oct 2026; /work/shared/REFERENCES.md 1.1): ragged over the
# loop on a v6e-8, Qwen3-30B-A3B at batch 64 and Gemma 4 26B-A4B (batch not given)
ANNOUNCED = {"qwen3": (64, 21.5), "gemma4": (None, 12.8)}


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-3000:]}")
    return [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]


def compose(plan, layer, launch_us, sync_us, whole=None):
    """One batch's step on one chip, in seconds. plan: an `ember project tp --json` row; layer:
    `ember bench moe --json` rows of that batch by impl ("loop", "ragged_compiled"); whole: the
    `ember bench decode --json` row of the compiled step (None: ragged is composed)."""
    peak, bw = plan["bf16_tflops"] * 1e12, plan["hbm_gbs"] * 1e9
    L = plan["moe_layers"]
    rest = max((plan["flops_per_step"] - plan["moe_flops_per_step"]) / peak,
               (plan["read_bytes_per_step"] - plan["moe_read_bytes_per_step"]) / bw)
    coll = plan["t_collectives_s"]
    loop = layer["loop"]
    loop_layer = (loop["roofline_us"] + loop["programs"] * launch_us + loop["syncs"] * sync_us) \
        * 1e-6
    rag = layer["ragged_compiled"]
    rag_layer = max(rag["flops"] / peak, plan["moe_read_bytes_per_step"] / L / bw)
    composed = rest + L * rag_layer + coll
    if whole:
        ragged = max(whole["flops"] / peak, plan["read_bytes_per_step"] / bw) + coll
    else:
        ragged = composed
    step_loop = rest + L * loop_layer + coll
    b = plan["batch"]
    return {"batch": b, "rest_s": rest, "coll_s": coll, "moe_layers": L,
            "ragged_moe_s": L * rag_layer, "loop_moe_s": L * loop_layer,
            "loop_programs": L * loop["programs"], "loop_syncs": L * loop["syncs"],
            "ragged_s": ragged, "ragged_composed_s": composed, "loop_s": step_loop,
            "ratio": step_loop / ragged, "ragged_tps": b / ragged, "loop_tps": b / step_loop}


def whole_step(a, key):
    shape, layers = SHAPES[key], LAYERS[key]
    shard = os.path.join(a.cache, f"{shape}-{layers}l-tp{a.degree}-shard")
    if not os.path.exists(os.path.join(shard, "config.json")):
        os.makedirs(a.cache, exist_ok=True)
        run([a.ember, "make-checkpoint", "--preset", shape, "--layers", str(layers),
             "--tp-shard", str(a.degree), "--out", shard])
    # bench decode compiles the step for a KV bucket of 128 positions
    return {r["batch"]: r for r in run([a.ember, "bench", "decode", "--device",
                                        f"tpu-aot:{a.topology}", "--model", shard, "--batches",
                                        a.batches, "--skip-peers", "--json"])
            if r.get("bench") == "decode"}


def spmd_step(a, key):
    """--spmd: the whole model as ONE program partitioned by libtpu over the slice's chips
    (`ember bench decode --spmd N --spmd-split-gate-up`), its weights shapes only (`ember
    make-checkpoint --shape-only`: no disk), XLA's per-chip figures and collectives."""
    shape, layers = SHAPES[key], LAYERS[key]
    hollow = os.path.join(a.cache, f"{shape}-{layers}l-shapes")
    if not os.path.exists(os.path.join(hollow, "config.json")):
        os.makedirs(a.cache, exist_ok=True)
        run([a.ember, "make-checkpoint", "--preset", shape, "--layers", str(layers),
             "--shape-only", "--out", hollow])
    return {r["batch"]: r for r in run([a.ember, "bench", "decode", "--device",
                                        f"tpu-aot:{a.topology}", "--model", hollow, "--batches",
                                        a.batches, "--spmd", str(a.degree),
                                        "--spmd-split-gate-up", "--skip-peers", "--json"])
            if r.get("bench") == "decode"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ember")
    ap.add_argument("--topology", default="v6e:2x4")
    ap.add_argument("--degree", type=int, default=8)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--models", default="qwen3,gemma4")
    ap.add_argument("--latency-us", default="10")
    ap.add_argument("--launch-us", default="6")
    ap.add_argument("--sync-us", default="110")
    ap.add_argument("--no-whole-step", action="store_true")
    ap.add_argument("--sensitivity", default="0,2,20",
                    help="launch overheads (us) to recompute loop / ragged at, same rows")
    ap.add_argument("--cache", default="build/bench-models")
    ap.add_argument("--spmd", action="store_true",
                    help="also compile the whole model as one SPMD program over the slice")
    ap.add_argument("--json", metavar="FILE",
                    help="also write the ragged / loop rows as JSON for `ember report --headline`")
    a = ap.parse_args()
    out_rows = []
    gen = a.topology.split(":")[0]
    overheads = [] if a.launch_us == "measure" else ["--launch-us", a.launch_us, "--sync-us",
                                                     a.sync_us]
    for key in a.models.split(","):
        shape = SHAPES[key]
        plan = {r["batch"]: r for r in run([a.ember, "project", "tp", "--shape", shape,
                                            "--degrees", str(a.degree), "--batches", a.batches,
                                            "--context", "128", "--devices", f"tpu-{gen}",
                                            "--latency-us", a.latency_us, "--json"])}
        rows = run([a.ember, "bench", "moe", "--device", f"tpu-aot:{a.topology}", "--model", key,
                    "--batches", a.batches, "--tp-shard", str(a.degree), "--json"] + overheads)
        head = next(r for r in rows if r.get("compile_only"))
        if a.launch_us == "measure" and head["launch_us"] <= 0:
            sys.exit("--launch-us measure: no xla:0 here to measure on (install the XLA CPU "
                     "plugin or set EMBER_PJRT_XLA_PLUGIN), or give --launch-us and --sync-us")
        layer = {}
        for r in rows:
            if r.get("bench") == "moe":
                layer.setdefault(r["batch"], {})[r["impl"]] = r
        whole = {} if a.no_whole_step else whole_step(a, key)
        if whole:
            print(f"\n{shape}: the compiled step of one chip's shard, compiled by libtpu")
            print("| batch | XLA GFLOP | XLA GB accessed | XLA roofline ms | GB read (hit "
                  "experts) | roofline ms | collectives ms | step ms | tokens/s | peak GB per "
                  "chip | fits |")
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            for b in sorted(whole):
                x, p = whole[b], plan[b]
                t = max(x["flops"] / (p["bf16_tflops"] * 1e12), p["read_bytes_per_step"] /
                        (p["hbm_gbs"] * 1e9))
                step = t + p["t_collectives_s"]
                print(f"| {b} | {x['flops'] / 1e9:.2f} | {x['bytes_accessed'] / 1e9:.2f} | "
                      f"{x['roofline_ms']:.2f} | {p['read_bytes_per_step'] / 1e9:.2f} | "
                      f"{t * 1e3:.2f} | {p['t_collectives_s'] * 1e3:.2f} | {step * 1e3:.2f} | "
                      f"{b / step:.0f} | {x['peak_bytes'] / 1e9:.2f} | "
                      f"{'yes' if x['fits_hbm'] else 'NO'} |")
        if a.spmd:
            sp = spmd_step(a, key)
            print(f"\n{shape}: the whole model as one SPMD program over {a.degree} chips, "
                  f"compiled by libtpu (per chip; the composed shard's XLA figures beside)")
            print("| batch | XLA GFLOP | XLA GB accessed | XLA roofline ms | peak GB per chip | "
                  "fits | all-reduce | all-gather | collective-permute | shard GFLOP | shard GB "
                  "accessed | shard peak GB |")
            print("|---|---|---|---|---|---|---|---|---|---|---|---|")
            for b in sorted(sp):
                x, w = sp[b], whole.get(b)
                ref = (f"{w['flops'] / 1e9:.2f} | {w['bytes_accessed'] / 1e9:.2f} | "
                       f"{w['peak_bytes'] / 1e9:.2f}") if w else "| |"
                print(f"| {b} | {x['flops'] / 1e9:.2f} | {x['bytes_accessed'] / 1e9:.2f} | "
                      f"{x['roofline_ms']:.2f} | {x['peak_bytes'] / 1e9:.2f} | "
                      f"{'yes' if x['fits_hbm'] else 'NO'} | {x['all_reduces']} | "
                      f"{x['all_gathers']} | {x['collective_permutes']} | {ref} |")
        ab, ar = ANNOUNCED[key]
        print(f"\n{shape} decode on a TPU {a.topology} slice, tensor parallel over {a.degree} "
              f"chips, per chip, projected (not measured): ragged "
              f"({'the whole compiled step' if whole else 'composed per layer'}) against the "
              f"per-expert loop; {head['launch_us']:g} us per program launched, "
              f"{head['sync_us']:g} us per routing sync, collectives {a.latency_us} us per call "
              f"+ ring transfer over ICI")
        print("| batch | rest ms | collectives ms | ragged MoE ms | loop MoE ms | loop programs "
              "/ syncs per step | ragged step ms | loop step ms | loop / ragged | announced | "
              "ragged tokens/s | loop tokens/s |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for b in sorted(layer):
            c = compose(plan[b], layer[b], head["launch_us"], head["sync_us"], whole.get(b))
            # the loop's layer as bench moe projected it (same overheads, printed to 0.01 us)
            got = c["loop_moe_s"] / c["moe_layers"] * 1e6
            assert abs(got - layer[b]["loop"]["projected_us"]) <= \
                0.005 * (layer[b]["loop"]["programs"] + 1) + 0.01, (got, layer[b]["loop"])
            ann = f"{ar}x" if ab in (None, b) else ""
            comp = f" ({c['ragged_composed_s'] * 1e3:.2f} composed)" if whole else ""
            row = {"model": shape, "topology": a.topology, "degree": a.degree, "batch": b,
                   "ragged_ms": c["ragged_s"] * 1e3, "loop_ms": c["loop_s"] * 1e3,
                   "ratio": c["ratio"], "ragged_tps": c["ragged_tps"],
                   "loop_tps": c["loop_tps"], "launch_us": head["launch_us"],
                   "sync_us": head["sync_us"], "latency_us": float(a.latency_us)}
            if ann:
                row["announced"] = float(ar)
            out_rows.append(row)
            print(f"| {b} | {c['rest_s'] * 1e3:.2f} | {c['coll_s'] * 1e3:.2f} | "
                  f"{c['ragged_moe_s'] * 1e3:.2f} | {c['loop_moe_s'] * 1e3:.1f} | "
                  f"{c['loop_programs']} / {c['loop_syncs']} | {c['ragged_s'] * 1e3:.2f}{comp} | "
                  f"{c['loop_s'] * 1e3:.1f} | {c['ratio']:.1f}x | {ann} | "
                  f"{c['ragged_tps']:.0f} | {c['loop_tps']:.0f} |")
        for lu in [float(v) for v in a.sensitivity.split(",") if v]:
            r = [compose(plan[b], layer[b], lu, head["sync_us"], whole.get(b)) for b in
                 sorted(layer)]
            print(f"  at {lu:g} us per launch: loop / ragged " +
                  ", ".join(f"{c['ratio']:.1f}x (batch {c['batch']})" for c in r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out_rows, f, indent=1)


if __name__ == "__main__":
    main()
