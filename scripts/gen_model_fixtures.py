#!/usr/bin/env python3
"""Tiny random checkpoints of every supported family, with transformers' outputs on them.

For each family: save_pretrained (safetensors) into tests/fixtures/models/<family>/, then record
in tests/fixtures/models/<family>_ref.{json,bin} (a Bundle): the logits for fixed input ids in
f32 and in bf16, a 16-token greedy continuation, and a left-padded batch of two prompts with its
greedy continuations; for bert, the last hidden states and the mean-pooled, L2-normalised
embeddings. Ember must match the logits within 1e-4 (f32) and the greedy tokens exactly.
"""
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "models")
VOCAB = 256


def common(**kw):
    base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    base.update(kw)
    return base


def families():
    import transformers as T
    return {
        "qwen3": (T.Qwen3Config(**common(head_dim=16, rope_theta=10000.0)), T.Qwen3ForCausalLM),
        "qwen3_moe": (T.Qwen3MoeConfig(**common(head_dim=16, num_experts=8, num_experts_per_tok=2,
                                                moe_intermediate_size=32, norm_topk_prob=True,
                                                decoder_sparse_step=1, mlp_only_layers=[1])),
                      T.Qwen3MoeForCausalLM),
        "llama": (T.LlamaConfig(**common(head_dim=16, rope_theta=500000.0, tie_word_embeddings=True,
                                         rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                       "original_max_position_embeddings": 32})),
                  T.LlamaForCausalLM),
        "mistral": (T.MistralConfig(**common(head_dim=16, sliding_window=8)), T.MistralForCausalLM),
        "mixtral": (T.MixtralConfig(**common(head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                                             intermediate_size=32)), T.MixtralForCausalLM),
        "gemma3_text": (T.Gemma3TextConfig(**common(head_dim=16, sliding_window=8, query_pre_attn_scalar=16,
                                                    layer_types=["sliding_attention", "full_attention"],
                                                    final_logit_softcapping=30.0,
                                                    hidden_activation="gelu_pytorch_tanh")),
                        T.Gemma3ForCausalLM),
        # Gemma 4 as the E2B/E4B checkpoints are made: per-layer inputs, the last two layers
        # reusing the keys/values of the last sliding and full layer before them, double-wide
        # MLPs there, and full-attention layers with their own head size and proportional rope
        "gemma4_text": (T.Gemma4TextConfig(**gemma4_common(
            num_hidden_layers=4, intermediate_size=48, sliding_window=6,
            layer_types=["sliding_attention", "full_attention"] * 2,
            num_kv_shared_layers=2, use_double_wide_mlp=True, hidden_size_per_layer_input=8,
            vocab_size_per_layer_input=VOCAB, final_logit_softcapping=30.0)),
            T.Gemma4ForCausalLM),
        # the 26B-A4B layout, saved as a multimodal gemma4 checkpoint without vision or audio
        # (weights under model.language_model.): a dense MLP and 8 experts in parallel in every
        # layer, keys = values with one kv head in the full-attention layers
        "gemma4": (T.Gemma4Config(text_config=T.Gemma4TextConfig(**gemma4_common(
            num_hidden_layers=3, intermediate_size=32, sliding_window=6,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"],
            hidden_size_per_layer_input=0, attention_k_eq_v=True, num_global_key_value_heads=1,
            enable_moe_block=True, num_experts=8, top_k_experts=2, moe_intermediate_size=16)),
            vision_config=None, audio_config=None),
            T.Gemma4ForConditionalGeneration),
        # last, so the families above keep their seeds (100 + position); biases on q, k, v
        "qwen2": (T.Qwen2Config(**common(rope_theta=10000.0)), T.Qwen2ForCausalLM),
    }


def gemma4_common(**kw):
    """Gemma 4 at a size that keeps the checkpoint near 250 KB: sliding layers with head_dim 8,
    full layers with global_head_dim 16 (4 of its 8 frequencies rotate, proportional rope)."""
    base = common(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  global_head_dim=16, tie_word_embeddings=True,
                  hidden_activation="gelu_pytorch_tanh")
    base.update(kw)
    return base


def randomise(model, seed):
    torch.manual_seed(seed)
    # Gemma 4's norms multiply by w itself (not 1 + w): keep them near 1
    unit = model.config.model_type.startswith("gemma4")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "layernorm" in name.lower() or name.endswith("router.scale"):
                p.normal_(1.0 if unit else 0.0, 0.2)  # norms away from the identity
            elif name.endswith("per_expert_scale"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.08)
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):  # a saved buffer (ones at init)
                b.uniform_(0.5, 1.5)


def causal(name, cfg, cls, seed):
    from transformers import GenerationConfig
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    model = cls(cfg).eval()
    randomise(model, seed)
    model.generation_config = GenerationConfig(eos_token_id=2, pad_token_id=0, bos_token_id=1)
    model.save_pretrained(d, safe_serialization=True)
    # generate() falls back on the model's eos for a None in the GenerationConfig passed to it:
    # without this a continuation that meets eos (2) would stop there and be padded
    model.generation_config.eos_token_id = None
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(3, VOCAB, (2, 12), generator=g)
    b = Bundle(os.path.join(OUT, name + "_ref"))
    b.add("ids", ids)
    with torch.no_grad():
        b.add("logits_f32", model(ids).logits.float())
        gc = GenerationConfig(max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0)
        out = model.generate(ids[:1], generation_config=gc)
        b.add("greedy", out[0, ids.shape[1]:])
        # a left-padded batch: prompt 0 is 5 tokens, prompt 1 is 9
        p0, p1 = ids[0, :5], ids[1, :9]
        batch = torch.zeros(2, 9, dtype=torch.long)
        mask = torch.zeros(2, 9, dtype=torch.long)
        batch[0, 4:], mask[0, 4:] = p0, 1
        batch[1], mask[1] = p1, 1
        outb = model.generate(batch, attention_mask=mask, generation_config=gc)
        b.add("batch_ids", batch)
        b.add("batch_mask", mask)
        b.add("batch_greedy", outb[:, 9:])
        mb = cls.from_pretrained(d, dtype=torch.bfloat16).eval()
        b.add("logits_bf16", mb(ids).logits.float())
    b.meta = {"family": name, "prompt_len": ids.shape[1]}
    print(name, b.write())


def bert(seed):
    import transformers as T
    d = os.path.join(OUT, "bert")
    shutil.rmtree(d, ignore_errors=True)
    cfg = T.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=128, max_position_embeddings=64, type_vocab_size=2)
    model = T.BertModel(cfg, add_pooling_layer=False).eval()
    randomise(model, seed)
    model.save_pretrained(d, safe_serialization=True)
    # generate() falls back on the model's eos for a None in the GenerationConfig passed to it:
    # without this a continuation that meets eos (2) would stop there and be padded
    model.generation_config.eos_token_id = None
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(3, VOCAB, (3, 10), generator=g)
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    with torch.no_grad():
        h = model(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).float()
    pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
    emb = torch.nn.functional.normalize(pooled, p=2, dim=1)
    b = Bundle(os.path.join(OUT, "bert_ref"))
    b.add("ids", ids)
    b.add("mask", mask)
    b.add("hidden", h)
    b.add("embeddings", emb)
    b.meta = {"family": "bert"}
    print("bert", b.write())


def main():
    want = sys.argv[1:]
    for i, (name, (cfg, cls)) in enumerate(families().items()):
        if not want or name in want:
            causal(name, cfg, cls, 100 + i)
    if not want or "bert" in want:
        bert(200)


if __name__ == "__main__":
    main()
