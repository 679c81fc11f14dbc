#!/usr/bin/env python3
"""Writes tests/fixtures/rope/inv_freq.json: RoPE inverse frequencies and attention scaling
computed by transformers' own rope initialisation functions, for tests/test_rope_config.c.

Usage: /opt/refvenv/bin/python scripts/gen_rope_fixtures.py
The default type with partial_rotary_factor uses GPT-NeoX's compute_default_rope_parameters
(Llama's ignores the factor); the others use ROPE_INIT_FUNCTIONS. The dynamic type above
max_position_embeddings is called as the model's forward calls it (seq_len a tensor).
"""
import json
import os

import torch
import transformers
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "rope", "inv_freq.json")

# name, rope_parameters, head_dim, max_position_embeddings, seq_len (dynamic only; None: init)
CASES = [
    ("default/llama2", {"rope_type": "default", "rope_theta": 10000.0}, 128, 4096, None),
    ("default/qwen3", {"rope_type": "default", "rope_theta": 1000000.0}, 128, 40960, None),
    ("default/gemma3_local", {"rope_type": "default", "rope_theta": 10000.0}, 256, 131072, None),
    ("default/small_d", {"rope_type": "default", "rope_theta": 10000.0}, 16, 512, None),
    ("default/partial_phi2", {"rope_type": "default", "rope_theta": 10000.0,
                              "partial_rotary_factor": 0.4}, 80, 2048, None),
    ("default/partial_half", {"rope_type": "default", "rope_theta": 10000.0,
                              "partial_rotary_factor": 0.5}, 128, 8192, None),
    ("default/partial_quarter", {"rope_type": "default", "rope_theta": 500000.0,
                                 "partial_rotary_factor": 0.25}, 256, 8192, None),
    ("linear/gemma3_global", {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0},
     256, 131072, None),
    ("linear/factor2", {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}, 64, 4096,
     None),
    ("linear/partial", {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0,
                        "partial_rotary_factor": 0.5}, 64, 4096, None),
    ("dynamic/init", {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 128, 2048,
     None),
    ("dynamic/short", {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 128, 2048,
     1000),
    ("dynamic/grown", {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}, 128, 2048,
     4096),
    ("dynamic/grown_far", {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}, 64, 2048,
     30001),
    ("dynamic/partial", {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0,
                         "partial_rotary_factor": 0.5}, 128, 1024, 5000),
    ("llama3/llama3.1_8b", {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192}, 128, 131072, None),
    ("llama3/llama3.2_1b", {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192}, 64, 131072, None),
    ("llama3/partial", {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192, "partial_rotary_factor": 0.5},
     128, 131072, None),
    ("yarn/qwen3", {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                    "original_max_position_embeddings": 32768}, 128, 131072, None),
    ("yarn/qwen2.5_notrunc", {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                              "original_max_position_embeddings": 32768, "truncate": False},
     128, 131072, None),
    ("yarn/deepseek_mscale", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                              "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                              "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096},
     64, 163840, None),
    ("yarn/gpt_oss", {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                      "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                      "original_max_position_embeddings": 4096}, 64, 131072, None),
    ("yarn/attention_factor", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0,
                               "attention_factor": 0.8, "beta_fast": 16.0, "beta_slow": 2.0,
                               "original_max_position_embeddings": 2048}, 64, 4096, None),
    ("yarn/partial", {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                      "partial_rotary_factor": 0.5, "original_max_position_embeddings": 2048},
     128, 8192, None),
    # Gemma 4's full-attention layers: head_dim / 2 frequencies, the first
    # int(partial_rotary_factor * head_dim // 2) of them rotating, the others zero
    ("proportional/gemma4_global", {"rope_type": "proportional", "rope_theta": 1000000.0,
                                    "partial_rotary_factor": 0.25}, 512, 131072, None),
    ("proportional/factor", {"rope_type": "proportional", "rope_theta": 1000000.0,
                             "partial_rotary_factor": 0.25, "factor": 8.0}, 256, 131072, None),
    ("proportional/small", {"rope_type": "proportional", "rope_theta": 1000000.0,
                            "partial_rotary_factor": 0.25}, 16, 128, None),
    ("proportional/odd_angles", {"rope_type": "proportional", "rope_theta": 10000.0,
                                 "partial_rotary_factor": 0.3}, 80, 4096, None),
    ("proportional/full", {"rope_type": "proportional", "rope_theta": 10000.0}, 64, 4096, None),
    ("proportional/none", {"rope_type": "proportional", "rope_theta": 10000.0,
                           "partial_rotary_factor": 0.0}, 32, 4096, None),
]

KEYS = ["factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor",
        "beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate",
        "partial_rotary_factor"]


def compute(params, head_dim, max_pos, seq_len):
    cfg = LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                      max_position_embeddings=max_pos, rope_parameters=dict(params))
    kind = params["rope_type"]
    if kind == "default":
        return GPTNeoXRotaryEmbedding.compute_default_rope_parameters(cfg)
    fn = ROPE_INIT_FUNCTIONS[kind]
    if kind == "dynamic" and seq_len is not None and seq_len > max_pos:
        # what dynamic_frequency_update does when the sequence grows past the cache
        return fn(cfg, None, seq_len=torch.tensor(seq_len))
    return fn(cfg, None)


def main():
    cases = []
    for name, params, head_dim, max_pos, seq_len in CASES:
        inv, scaling = compute(params, head_dim, max_pos, seq_len)
        inv = inv.to(torch.float32)
        cfg = {"type": params["rope_type"], "theta": params["rope_theta"], "head_dim": head_dim,
               "max_position_embeddings": max_pos}
        for k in KEYS:
            if k in params:
                cfg[k] = params[k]
        cases.append({"name": name, "config": cfg, "seq_len": seq_len or 0,
                      "inv_freq": [float(x) for x in inv.tolist()],
                      "attention_scaling": float(scaling)})
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    meta = {"version": 1, "generator": "scripts/gen_rope_fixtures.py",
            "transformers": transformers.__version__, "torch": torch.__version__, "cases": cases}
    with open(OUT, "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} cases -> {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
