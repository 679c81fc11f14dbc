#!/usr/bin/env python3
"""`ember project tp`: tensor-parallel decode on paper, checked against what it stands on.

Usage: check_project_tp.py EMBER

1. The model arithmetic against the models' own cards: the built-in shapes' parameter counts
   (weights at degree 1, bf16) are the published totals (Qwen3-30B-A3B 30.5B with 3.3B activated,
   Qwen3-0.6B 0.6B, Llama 3.1 8B 8.03B and 70B 70.6B) within 1 %; "activated" is what a batch-1
   step reads besides the KV cache, plus the embedding table it gathers one row of.
2. The collective bytes per rank and step against the plan's count (2 L + 2 calls; (2 L + 1) B H
   x w all_reduce (the vocab-parallel embedding's rows, o_proj and the MLP per layer), B V/N x w
   all_gather) on the tiny test checkpoints, and against what
   `ember bench decode --tp 2 --device xla` measures on the same checkpoints when XLA's CPU plugin
   is there (said when it is not).
3. The time model recomputed here from the printed bytes and flops and the device's figures
   (max(memory, compute) + calls x latency + ring transfer), the degree refusals (heads, KV
   heads, vocabulary) naming the dimension, a KV-head count below the degree replicated, and the
   bad inputs (unknown shape, device or option; a model type that is not modelled).
4. Gemma 4: the projected bytes of the 26B-A4B-layout test checkpoint are its safetensors' bytes
   exactly; the gemma4-26b-a4b shape's parameters are the layer arithmetic of its configuration
   (recomputed here), its experts the 22.8B /work/shared/REFERENCES.md gives; 3 all_reduces per
   layer (the dense MLP and the experts reduced apart); `make-checkpoint --preset gemma4-26b-a4b
   --tp-shard 16` writes one rank's bytes.
5. scripts/project_tpu_headline.py's composition (compose()) recomputed from its inputs: a real
   `ember project tp` row and made-up per-layer rows (no libtpu needed).
Needs only the Python standard library.
"""
import json
import os
import subprocess
import sys


def fail(msg):
    sys.exit("FAIL: " + msg)


def run(ember, args, env=None, ok=True):
    r = subprocess.run(ember + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=env)
    if ok and r.returncode != 0:
        fail(f"{' '.join(args)} exited {r.returncode}:\n{r.stderr}")
    return r


def rows(ember, args):
    out = run(ember, ["project", "tp", "--json"] + args).stdout
    return [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]


def close(a, b, rel):
    return abs(a - b) <= rel * abs(b)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ember = sys.argv[1:]
    fixtures = os.environ.get("EMBER_FIXTURES") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "fixtures")

    # 1. parameter counts of the model cards (total, activated), in billions
    cards = {"qwen3-30b-a3b": (30.5, 3.3, 151936 * 2048), "qwen3-0.6b": (0.6, None, 0),
             "llama-3.1-8b": (8.03, None, 0), "llama-3.1-70b": (70.6, None, 0)}
    for shape, (total, active, emb) in cards.items():
        r = rows(ember, ["--shape", shape, "--degrees", "1", "--batches", "1", "--devices", "h100"])
        if len(r) != 1 or r[0]["elem_bytes"] != 2:
            fail(f"{shape}: rows {r}")
        got = r[0]["weight_bytes_per_rank"] / 2 / 1e9
        if not close(got, total, 0.01):
            fail(f"{shape}: {got:.3f}B parameters, the model card says {total}B")
        msg = f"{shape}: {got:.2f}B parameters (card {total}B)"
        if active:
            kv = r[0]["kv_bytes_per_rank"]  # batch 1: the KV read is the whole cache
            act = ((r[0]["read_bytes_per_step"] - kv) / 2 + emb - 2048) / 1e9
            if not close(act, active, 0.02):
                fail(f"{shape}: {act:.3f}B activated, the model card says {active}B")
            msg += f", {act:.2f}B activated (card {active}B)"
        print(msg)

    # 2. collective bytes on the test checkpoints: the plan's count, and the measured one
    env = dict(os.environ)
    env.setdefault("EMBER_PJRT_OPTIONS", "cpu_device_count=2")
    measured_any = False
    for fam in ["qwen3", "llama", "qwen3_moe", "gemma4"]:
        model = os.path.join(fixtures, "models", fam)
        cfg = json.load(open(os.path.join(model, "config.json")))
        cfg = cfg.get("text_config", cfg)
        L, H, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]
        red = 3 if cfg.get("enable_moe_block") else 2  # Gemma 4: dense MLP and experts apart
        proj = {x["batch"]: x for x in rows(ember, ["--model", model, "--degrees", "2",
                                                    "--batches", "1,3", "--devices", "h100"])}
        for b, x in proj.items():
            w = x["elem_bytes"]
            if w != 4:
                fail(f"{fam}: {w} bytes per element, the checkpoint is float32")
            want = (red * L + 2, (red * L + 1) * b * H * w, b * (V // 2) * w)
            got = (x["collectives_per_step"], x["all_reduce_bytes_per_step"],
                   x["all_gather_bytes_per_step"])
            if got != want:
                fail(f"{fam} batch {b}: collectives {got}, the plan gives {want}")
        r = run(ember, ["bench", "decode", "--tp", "2", "--device", "xla", "--model", model,
                        "--steps", "1", "--batches", "1,3", "--json"]
                + (["--ep"] if fam == "qwen3_moe" else []), env=env, ok=False)
        if "no device named" in r.stderr:
            continue
        if r.returncode != 0:
            fail(f"bench decode --tp 2 on {fam} exited {r.returncode}:\n{r.stderr[-2000:]}")
        for ln in r.stdout.splitlines():
            if not ln.startswith("{"):
                continue
            m = json.loads(ln)
            if m.get("bench") != "decode_tp":
                continue
            p = proj[m["batch"]]
            for k in ["collectives_per_step", "all_reduce_bytes_per_step",
                      "all_gather_bytes_per_step"]:
                if m[k] != p[k]:
                    fail(f"{fam} batch {m['batch']}: {k} measured {m[k]}, projected {p[k]}")
            measured_any = True
        print(f"{fam}: collective calls and bytes per step as the plan and the measurement say")
    if not measured_any:
        print("NOTE: no XLA PJRT plugin: the projected bytes were checked against the plan only, "
              "not against `ember bench decode --tp 2` (install xla-cpu-pjrt or set "
              "EMBER_PJRT_XLA_PLUGIN)")

    # 3. the time model, refusals, replication
    for x in rows(ember, ["--shape", "qwen3-30b-a3b", "--devices", "tpu-v6e,h200",
                          "--latency-us", "5", "--context", "2048"]):
        n, b = x["degree"], x["batch"]
        t_mem = x["read_bytes_per_step"] / (x["hbm_gbs"] * 1e9)
        t_cmp = x["flops_per_step"] / (x["bf16_tflops"] * 1e12)
        sent = x["all_reduce_bytes_per_step"] * 2 * (n - 1) / n + \
            x["all_gather_bytes_per_step"] * (n - 1)
        t = max(t_mem, t_cmp) + x["collectives_per_step"] * 5e-6 + sent / (x["link_gbs"] * 1e9)
        if not close(x["t_step_s"], t, 1e-6) or not close(x["tokens_per_s"], b / t, 1e-5):
            fail(f"{x['device']} degree {n} batch {b}: step {x['t_step_s']} s, recomputed {t}")
        if (n == 1) != (x["collectives_per_step"] == 0):
            fail(f"degree {n}: {x['collectives_per_step']} collectives")
        fits = x["weight_bytes_per_rank"] + x["kv_bytes_per_rank"] <= x["memory_gib"] * 2**30
        if x["fits"] != fits or (x["device"] == "tpu-v6e" and n == 1 and fits):
            fail(f"{x['device']} degree {n} batch {b}: fits {x['fits']} (61 GB of weights "
                 f"do not fit one 32 GB chip)")
    print("time model recomputed from the printed bytes, flops and device figures")

    llama = os.path.join(fixtures, "models", "llama")
    cfg = json.load(open(os.path.join(llama, "config.json")))
    r = rows(ember, ["--model", llama, "--degrees", "3,4", "--batches", "1", "--devices", "l4"])
    heads, kvh = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    if r[0]["legal"] or f"num_attention_heads ({heads})" not in r[0]["why"] or "3" not in r[0]["why"]:
        fail(f"llama degree 3: {r[0]}")
    if kvh < 4 and not r[1]["legal"]:
        fail(f"llama degree 4 with {kvh} KV heads: refused ({r[1]}), the heads are replicated")
    print(f"llama: degree 3 refused ({r[0]['why']}); degree 4 over {kvh} KV heads replicates them")

    bad = [(["--shape", "nope"], "unknown"), (["--shape", "qwen3-0.6b", "--devices", "tpu-v9"],
           "no device spec named 'tpu-v9'"), (["--shape", "qwen3-0.6b", "--degrees", "0"],
           "--degrees"), (["--model", os.path.join(fixtures, "models", "gemma4_text")],
           "not modelled"), (["--model", os.path.join(fixtures, "models", "bert")], "not modelled"), (["--model", "/nonexistent-dir"], "nonexistent"),
           ([], "one of --model or --shape"), (["--shape", "qwen3-0.6b", "--dtype", "f8"], "--dtype")]
    for args, want in bad:
        r = run(ember, ["project", "tp"] + args, ok=False)
        if r.returncode == 0 or want not in r.stderr:
            fail(f"project tp {' '.join(args)}: exit {r.returncode}, stderr {r.stderr!r}; "
                 f"want an error naming {want!r}")
    print("bad inputs refused by name")

    # make-checkpoint --tp-shard: one rank's shard as a model, its bytes as the projection says
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "shard")
        run(ember, ["make-checkpoint", "--preset", "demo-moe", "--layers", "2", "--tp-shard", "8",
                    "--dtype", "f32", "--out", out])
        cfg = json.load(open(os.path.join(out, "config.json")))
        got = (cfg["num_attention_heads"], cfg["num_key_value_heads"],
               cfg["moe_intermediate_size"], cfg["vocab_size"], cfg["_tp_shard_of"])
        if got != (1, 1, 32, 128, 8):
            fail(f"demo-moe / 8: heads, KV heads, moe_intermediate, vocab, shard {got}")
        full = os.path.join(tmp, "full")
        run(ember, ["make-checkpoint", "--preset", "demo-moe", "--layers", "2", "--dtype", "f32",
                    "--out", full])
        p = rows(ember, ["--model", full, "--degrees", "8", "--batches", "1", "--devices", "h100"])[0]
        total = json.load(open(os.path.join(out, "model.safetensors.index.json")))["metadata"][
            "total_size"]
        want = p["weight_bytes_per_rank"]  # the embedding's V/8 rows too (embedding_rowwise)
        if total != want:
            fail(f"the shard holds {total} bytes, the projection's rank {want}")
        r = run(ember, ["make-checkpoint", "--preset", "demo-moe", "--tp-shard", "3", "--out",
                        os.path.join(tmp, "bad")], ok=False)
        if r.returncode == 0 or "num_attention_heads (8)" not in r.stderr:
            fail(f"--tp-shard 3: exit {r.returncode}, {r.stderr!r}")
    print("make-checkpoint --tp-shard 8: the rank's dimensions and bytes; 3 refused by name")

    check_gemma4(ember, fixtures)
    check_compose(ember)
    print("ok")


def safetensors_bytes(path):
    import struct
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
    return sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in head.items()
               if k != "__metadata__")


def check_gemma4(ember, fixtures):
    # the test checkpoint (full layers with their own head size, one KV head, keys = values;
    # a dense MLP and 8 experts in every layer): every byte accounted for
    model = os.path.join(fixtures, "models", "gemma4")
    r = rows(ember, ["--model", model, "--degrees", "1", "--batches", "1", "--devices", "h100"])[0]
    have = safetensors_bytes(os.path.join(model, "model.safetensors"))
    if r["weight_bytes_per_rank"] != have:
        fail(f"gemma4 test checkpoint: projected {r['weight_bytes_per_rank']} bytes, its "
             f"safetensors hold {have}")
    # Gemma 4 26B-A4B (REFERENCES.md 3: hidden 2816, 30 layers, 5 sliding + 1 full, 16 heads, 8
    # KV heads of 256 on sliding layers, 2 of 512 with K = V on full ones, dense MLP 2112 beside
    # 128 experts of 704, vocabulary 262144 tied)
    H, L, V, E, I, Id = 2816, 30, 262144, 128, 704, 2112
    full = [(i + 1) % 6 == 0 for i in range(L)]
    attn = sum(H * 16 * hd * 2 + H * kv * hd * (1 if f else 2) + 2 * hd
               for f, hd, kv in [(f, 512 if f else 256, 2 if f else 8) for f in full])
    per_layer = 7 * H + 1 + 3 * H * Id + H * E + H + E  # norms, scalar, dense MLP, router
    experts = L * E * 3 * H * I
    total = attn + L * per_layer + experts + V * H + H
    r = rows(ember, ["--shape", "gemma4-26b-a4b", "--degrees", "1,8", "--batches", "1",
                     "--devices", "tpu-v6e", "--context", "128"])
    got = r[0]["weight_bytes_per_rank"] / 2
    if got != total:
        fail(f"gemma4-26b-a4b: {got} parameters, the layer arithmetic gives {total}")
    if not close(experts / 1e9, 22.8, 0.01):
        fail(f"gemma4-26b-a4b: {experts / 1e9:.2f}B in experts, REFERENCES.md says 22.8B")
    if r[1]["collectives_per_step"] != 3 * L + 2 or r[1]["moe_layers"] != L:
        fail(f"gemma4-26b-a4b degree 8: {r[1]['collectives_per_step']} collectives, "
             f"{r[1]['moe_layers']} MoE layers")
    print(f"gemma4: the test checkpoint's {have} bytes; 26B-A4B {got / 1e9:.2f}B parameters "
          f"({experts / 1e9:.2f}B in experts), 3 all_reduces per layer")

    # make-checkpoint's one-layer shard of 16 (0.2 GB) holds what the plan gives one rank of the
    # one-layer model (a config.json is all project tp needs)
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        full = os.path.join(tmp, "full")
        os.makedirs(full)
        json.dump({"model_type": "gemma4_text", "vocab_size": V, "hidden_size": H,
                   "intermediate_size": Id, "num_hidden_layers": 1, "num_attention_heads": 16,
                   "num_key_value_heads": 8, "head_dim": 256, "global_head_dim": 512,
                   "num_global_key_value_heads": 2, "attention_k_eq_v": True,
                   "enable_moe_block": True, "num_experts": E, "top_k_experts": 8,
                   "moe_intermediate_size": I, "hidden_size_per_layer_input": 0,
                   "sliding_window": 1024, "tie_word_embeddings": True,
                   "torch_dtype": "bfloat16"}, open(os.path.join(full, "config.json"), "w"))
        shard = os.path.join(tmp, "shard")
        run(ember, ["make-checkpoint", "--preset", "gemma4-26b-a4b", "--layers", "1",
                    "--tp-shard", "16", "--out", shard])
        total = json.load(open(os.path.join(shard, "model.safetensors.index.json")))[
            "metadata"]["total_size"]
        p = rows(ember, ["--model", full, "--degrees", "16", "--batches", "1", "--devices",
                         "h100"])[0]
        if total != p["weight_bytes_per_rank"]:
            fail(f"gemma4-26b-a4b one-layer shard of 16: {total} bytes, the plan gives one rank "
                 f"{p['weight_bytes_per_rank']}")
    print("make-checkpoint --preset gemma4-26b-a4b --tp-shard 16: the rank's bytes")


def check_compose(ember):
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                        "project_tpu_headline.py")
    spec = importlib.util.spec_from_file_location("headline", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    p = rows(ember, ["--shape", "qwen3-30b-a3b", "--degrees", "8", "--batches", "64",
                     "--devices", "tpu-v6e", "--context", "128", "--latency-us", "10"])[0]
    # the routed blocks' share, from the dimensions: 48 layers of a router [128, 2048] and the
    # experts a batch of 64 hits under uniform routing, each 3 x 2048 x 768/8
    E, k, H, L = 128, 8, 2048, 48
    touched = E * (1 - (1 - k / E) ** 64)
    moe = L * (H * E + touched * 3 * H * 96) * 2
    if not close(p["moe_read_bytes_per_step"], moe, 1e-9) or p["moe_layers"] != L:
        fail(f"qwen3 degree 8 batch 64: MoE bytes {p['moe_read_bytes_per_step']}, want {moe}")
    layer = {"loop": {"roofline_us": 400.0, "programs": 1000, "syncs": 1},
             "ragged_compiled": {"flops": 6e8}}
    c = mod.compose(p, layer, 6.0, 110.0)
    peak, bw = 918e12, 1640e9
    rest = max((p["flops_per_step"] - p["moe_flops_per_step"]) / peak,
               (p["read_bytes_per_step"] - moe) / bw)
    loop = rest + L * (400 + 1000 * 6 + 110) * 1e-6 + p["t_collectives_s"]
    ragged = rest + L * max(6e8 / peak, moe / L / bw) + p["t_collectives_s"]
    want = {"loop_s": loop, "ragged_s": ragged, "ratio": loop / ragged,
            "loop_tps": 64 / loop, "ragged_tps": 64 / ragged, "loop_programs": 48000}
    for key, v in want.items():
        if not close(c[key], v, 1e-9):
            fail(f"compose: {key} {c[key]}, recomputed {v}")
    whole = mod.compose(p, layer, 6.0, 110.0, {"flops": 5e10})
    want = max(5e10 / peak, p["read_bytes_per_step"] / bw) + p["t_collectives_s"]
    if not close(whole["ragged_s"], want, 1e-9) or whole["loop_s"] != c["loop_s"]:
        fail(f"compose with the whole step: ragged {whole['ragged_s']}, recomputed {want}")
    print(f"headline composition recomputed (qwen3 batch 64, made-up layer: loop "
          f"{loop * 1e3:.1f} ms, ragged {ragged * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
