"""Peer for `ember bench moe`: transformers' MoE blocks in torch eager on the CPU.

stdin: {"model": "qwen3_30b_a3b" | "gemma4_26b_a4b", "batches": [...], "threads": N,
        "min_time": s}
stdout: one {"name": "<impl>_<batch>", "ms": ..., "experts_hit": ...} per measurement, for every
experts implementation transformers offers ("eager" = the per-expert loop, "batched_mm",
"grouped_mm" when torch has it). Exits 3 when torch or transformers is missing.
"""
import json
import sys
import time

try:
    import torch
    import transformers  # noqa: F401
except Exception as e:  # noqa: BLE001
    print(json.dumps({"unavailable": str(e)}))
    sys.exit(3)


def timeit(fn, min_time):
    fn()
    times = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > min_time and len(times) >= 3:
            break
    times.sort()
    return times[len(times) // 2] * 1e3


def build(model):
    torch.manual_seed(0)
    if model == "qwen3_30b_a3b":
        from transformers import Qwen3MoeConfig
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock
        cfg = Qwen3MoeConfig(hidden_size=2048, num_experts=128, num_experts_per_tok=8,
                             moe_intermediate_size=768, norm_topk_prob=True)
        block = Qwen3MoeSparseMoeBlock(cfg)
        route = None
    else:
        from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
        from transformers.models.gemma4.modeling_gemma4 import Gemma4TextExperts, Gemma4TextRouter
        cfg = Gemma4TextConfig(hidden_size=2816, num_experts=128, top_k_experts=8,
                               moe_intermediate_size=704, enable_moe_block=True)
        router = Gemma4TextRouter(cfg)
        experts = Gemma4TextExperts(cfg)
        block = torch.nn.ModuleDict({"router": router, "experts": experts})
        route = True
    with torch.no_grad():
        for p in block.parameters():
            p.uniform_(-0.05, 0.05)
    block = block.to(torch.bfloat16).eval()
    return cfg, block, route


def main():
    task = json.load(sys.stdin)
    torch.set_num_threads(int(task.get("threads", 1)))
    cfg, block, gemma = build(task["model"])
    impls = ["eager", "batched_mm"]
    if hasattr(torch.nn.functional, "grouped_mm") or hasattr(torch, "_grouped_mm"):
        impls.append("grouped_mm")
    hidden = cfg.hidden_size
    for impl in impls:
        cfg._experts_implementation = impl
        for b in task["batches"]:
            x = torch.randn(b, hidden).to(torch.bfloat16)
            try:
                with torch.no_grad():
                    if gemma:
                        def fn():
                            _, w, i = block["router"](x)
                            return block["experts"](x, i, w)
                        _, _, idx = block["router"](x)
                    else:
                        def fn():
                            return block(x.unsqueeze(0))
                        _, _, idx = block.gate(x)
                    ms = timeit(fn, task.get("min_time", 0.5))
                hit = int(torch.unique(idx).numel())
                print(json.dumps({"name": f"{impl}_{b}", "ms": ms, "experts_hit": hit}), flush=True)
            except Exception as e:  # noqa: BLE001
                print(json.dumps({"name": f"{impl}_{b}", "error": str(e)[:200]}), flush=True)


if __name__ == "__main__":
    main()
