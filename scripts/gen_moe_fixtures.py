#!/usr/bin/env python3
"""Reference outputs of transformers' MoE blocks for tests/test_moe.c.

Qwen3MoeSparseMoeBlock (softmax router, top-k, optional renormalisation, SwiGLU experts) and
Gemma 4's router + experts (GELU-tanh gating, per-expert scale), tiny dimensions, f32 and bf16.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "moe")


def qwen3(dtype, norm, name):
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    torch.manual_seed(11)
    cfg = Qwen3MoeConfig(hidden_size=32, num_experts=8, num_experts_per_tok=2,
                         moe_intermediate_size=16, norm_topk_prob=norm, hidden_act="silu")
    block = Qwen3MoeSparseMoeBlock(cfg)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.2)
    block = block.to(dtype).eval()
    x = torch.randn(2, 5, 32).to(dtype)
    with torch.no_grad():
        y = block(x)
        logits, weights, idx = block.gate(x.reshape(-1, 32))
    b = Bundle(os.path.join(OUT, name))
    b.meta = {"top_k": 2, "norm_topk_prob": norm, "act": "silu"}
    b.add("x", x.reshape(-1, 32))
    b.add("router", block.gate.weight.data)
    b.add("gate_up", block.experts.gate_up_proj.data)
    b.add("down", block.experts.down_proj.data)
    b.add("logits", logits)
    b.add("route_weights", weights)
    b.add("route_indices", idx)
    b.add("y", y.reshape(-1, 32))
    print(name, b.write())


def gemma4(dtype, name):
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextExperts, Gemma4TextRouter

    torch.manual_seed(12)
    cfg = Gemma4TextConfig(hidden_size=32, num_experts=8, top_k_experts=2, moe_intermediate_size=16,
                           hidden_activation="gelu_pytorch_tanh", enable_moe_block=True)
    router = Gemma4TextRouter(cfg)
    experts = Gemma4TextExperts(cfg)
    with torch.no_grad():
        for p in list(router.parameters()) + list(experts.parameters()):
            p.normal_(0, 0.2)
        router.per_expert_scale.uniform_(0.5, 1.5)
    router = router.to(dtype).eval()
    experts = experts.to(dtype).eval()
    x = torch.randn(10, 32).to(dtype)
    with torch.no_grad():
        _, weights, idx = router(x)
        # the router's logits, to feed em_moe_route with the same scores
        h = router.norm(x) * router.scale * router.scalar_root_size
        logits = router.proj(h)
        y = experts(x, idx, weights)
    b = Bundle(os.path.join(OUT, name))
    b.meta = {"top_k": 2, "norm_topk_prob": True, "act": "gelu_tanh"}
    b.add("x", x)
    b.add("per_expert_scale", router.per_expert_scale.data)
    b.add("gate_up", experts.gate_up_proj.data)
    b.add("down", experts.down_proj.data)
    b.add("logits", logits)
    b.add("route_weights", weights)
    b.add("route_indices", idx)
    b.add("y", y)
    print(name, b.write())


if __name__ == "__main__":
    for dt, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        qwen3(dt, True, f"qwen3_moe_norm_{tag}")
        qwen3(dt, False, f"qwen3_moe_nonorm_{tag}")
        gemma4(dt, f"gemma4_{tag}")
