"""Peer for `ember bench decode`: transformers' eager generate on torch CPU, same checkpoint.

stdin: {"model": DIR, "threads": N, "batches": [1, 16], "prompt": 16, "new": 32, "prefill": 512}
stdout: {"name": "decode_<b>", "ms_per_step": ...} and {"name": "prefill", "ms": ...}.
Exits 3 when torch or transformers is missing.
"""
import json
import sys
import time

try:
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
except Exception as e:  # noqa: BLE001
    print(json.dumps({"unavailable": str(e)}))
    sys.exit(3)


def main():
    t = json.load(sys.stdin)
    torch.set_num_threads(int(t.get("threads", 1)))
    model = AutoModelForCausalLM.from_pretrained(t["model"], dtype=torch.bfloat16).eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for b in t["batches"]:
            ids = torch.randint(10, vocab, (b, t["prompt"]), generator=g)
            gc1 = GenerationConfig(max_new_tokens=1, do_sample=False, eos_token_id=None, pad_token_id=0)
            gcn = GenerationConfig(max_new_tokens=1 + t["new"], min_new_tokens=1 + t["new"],
                                   do_sample=False, eos_token_id=None, pad_token_id=0)
            model.generate(ids, generation_config=gc1)  # warm-up
            t0 = time.perf_counter()
            model.generate(ids, generation_config=gc1)
            t1 = time.perf_counter()
            model.generate(ids, generation_config=gcn)
            t2 = time.perf_counter()
            step = ((t2 - t1) - (t1 - t0)) / t["new"]
            print(json.dumps({"name": f"decode_{b}", "ms": step * 1e3}), flush=True)
        ids = torch.randint(10, vocab, (1, t["prefill"]), generator=g)
        model(ids[:, :16])
        t0 = time.perf_counter()
        model(ids)
        print(json.dumps({"name": "prefill", "ms": (time.perf_counter() - t0) * 1e3}), flush=True)


if __name__ == "__main__":
    main()
