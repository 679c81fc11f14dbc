"""Peer for `ember bench python`: the ember Python package and transformers, same checkpoint.

stdin: {"model": DIR, "threads": N, "prompt": [ids], "new": N, "op_iters": K}
stdout: {"name": "ember_decode"|"hf_decode", "ms": per token} and {"name": "ember_op", "ms": per
op}. Exits 3 when the ember package cannot be imported; transformers is optional.
"""
import json
import sys
import time

try:
    import ember
except Exception as e:  # noqa: BLE001
    print(json.dumps({"unavailable": f"import ember: {e} (pip install . into this Python)"}))
    sys.exit(3)


def per_token(generate, new):
    """Best of three (time for 1 + new tokens - time for 1) / new, as the C side measures."""
    generate(2)  # warm-up
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        generate(1)
        t1 = time.perf_counter()
        generate(1 + new)
        t2 = time.perf_counter()
        ms = ((t2 - t1) - (t1 - t0)) / new * 1e3
        best = ms if best is None else min(best, ms)
    return best


def main():
    t = json.load(sys.stdin)
    prompt, new = t["prompt"], t["new"]
    model = ember.AutoModelForCausalLM.from_pretrained(t["model"], offline=True)
    ms = per_token(lambda n: model.generate([prompt], max_new_tokens=n, do_sample=False,
                                            repetition_penalty=1.0, eos_token_id=[]), new)
    print(json.dumps({"name": "ember_decode", "ms": ms}), flush=True)
    del model
    a = ember.tensor([1.0, 2.0, 3.0, 4.0])
    k = t["op_iters"]
    add = ember.ops.add
    best = None
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(k):
            add(a, a)
        dt = (time.perf_counter() - t0) / k * 1e3
        best = dt if best is None else min(best, dt)
    print(json.dumps({"name": "ember_op", "ms": best}), flush=True)
    try:
        import torch
        from transformers import AutoModelForCausalLM, GenerationConfig
    except Exception:  # noqa: BLE001 - transformers is an optional peer
        return
    torch.set_num_threads(int(t.get("threads", 1)))
    hf = AutoModelForCausalLM.from_pretrained(t["model"], dtype=torch.bfloat16).eval()
    ids = torch.tensor([prompt])

    def gen(n):
        cfg = GenerationConfig(max_new_tokens=n, min_new_tokens=n, do_sample=False,
                               eos_token_id=None, pad_token_id=0)
        with torch.no_grad():
            hf.generate(ids, generation_config=cfg)
    print(json.dumps({"name": "hf_decode", "ms": per_token(gen, new)}), flush=True)


if __name__ == "__main__":
    main()
