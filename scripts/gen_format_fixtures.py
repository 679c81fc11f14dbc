#!/usr/bin/env python3
"""Generates the Hugging Face format fixtures in tests/fixtures/{safetensors,config}/ with the
real safetensors, torch and transformers libraries (pinned in scripts/requirements-fixtures.txt).

Usage: /opt/refvenv/bin/python scripts/gen_format_fixtures.py [safetensors] [config]

Every expected value comes from those libraries: decoded tensor values from torch, checkpoint
files from safetensors / transformers' save_pretrained, configuration values (defaults
included) from the real config classes. The malformed safetensors corpus is checked here to be
rejected by the safetensors library too; the C tests check Ember's own error messages.
"""
import json
import os
import shutil
import struct
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "tests", "fixtures")


def reset_dir(d):
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)


def hexbytes(t):
    """Little-endian bytes of a CPU tensor as a hex string."""
    t = t.contiguous().reshape(-1)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    return t.view(torch.uint8).numpy().tobytes().hex()


# ---------------------------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------------------------

F8 = {
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
    "F8_E4M3FNUZ": torch.float8_e4m3fnuz,
    "F8_E5M2FNUZ": torch.float8_e5m2fnuz,
    "F8_E8M0": torch.float8_e8m0fnu,
}


def dtype_tensors():
    """One tensor per file dtype, with values that exercise the conversions exactly."""
    g = torch.Generator().manual_seed(1234)
    t = {}
    t["f64"] = torch.randn(3, 5, generator=g, dtype=torch.float64) * 100
    t["f32"] = torch.randn(4, 6, generator=g) * 10
    t["f32"][0, :4] = torch.tensor([float("inf"), -float("inf"), 0.0, -0.0])
    t["f16"] = (torch.randn(2, 3, 4, generator=g) * 100).to(torch.float16)
    t["f16"][0, 0, :3] = torch.tensor([65504.0, 6e-8, -0.0])
    t["bf16"] = (torch.randn(5, 7, generator=g) * 1e4).to(torch.bfloat16)
    t["i64"] = torch.randint(-(2**40), 2**40, (9,), generator=g, dtype=torch.int64)
    t["i32"] = torch.randint(-(2**31), 2**31 - 1, (2, 5), generator=g, dtype=torch.int32)
    t["i16"] = torch.randint(-(2**15), 2**15 - 1, (11,), generator=g, dtype=torch.int16)
    t["i8"] = torch.arange(-128, 128, dtype=torch.int16).to(torch.int8).reshape(16, 16)
    t["u8"] = torch.arange(0, 256, dtype=torch.int16).to(torch.uint8).reshape(2, 128)
    t["bool"] = torch.randint(0, 2, (3, 3), generator=g).to(torch.bool)
    t["u16"] = torch.tensor([0, 1, 40000, 65535], dtype=torch.int32).to(torch.uint16)
    t["u32"] = torch.tensor([0, 7, 3_000_000_000, 2**32 - 1], dtype=torch.int64).to(torch.uint32)
    t["u64"] = torch.tensor([0, 9, 2**53, 2**62], dtype=torch.int64).to(torch.uint64)
    for name, dt in F8.items():
        # every one of the 256 codes, NaNs and infinities included
        t[name.lower()] = torch.arange(256, dtype=torch.int16).to(torch.uint8).view(dt).reshape(16, 16)
    t["scalar"] = torch.tensor(3.25)
    t["empty"] = torch.zeros(0, 4)
    return t


def expected_entry(v):
    e = {"shape": list(v.shape)}
    e["raw"] = hexbytes(v)
    if v.dtype in (torch.uint16, torch.uint32, torch.uint64):
        e["f32"] = hexbytes(v.to(torch.int64).to(torch.float32))
        e["i64"] = hexbytes(v.to(torch.int64))
        return e
    e["f32"] = hexbytes(v.to(torch.float32))
    e["bf16"] = hexbytes(v.to(torch.bfloat16))
    e["f64"] = hexbytes(v.to(torch.float64))
    if not v.dtype.is_floating_point:
        e["i64"] = hexbytes(v.to(torch.int64))
    return e


def gen_dtypes(out):
    tensors = dtype_tensors()
    path = os.path.join(out, "dtypes.safetensors")
    save_file(tensors, path, metadata={"format": "pt", "note": "every dtype"})
    back = load_file(path)
    blob = open(path, "rb").read()
    header = json.loads(blob[8:8 + struct.unpack("<Q", blob[:8])[0]])
    exp = {}
    for k, v in back.items():
        assert hexbytes(v) == hexbytes(tensors[k])
        e = expected_entry(v)
        e["dtype"] = header[k]["dtype"]
        exp[k] = e
    with open(os.path.join(out, "dtypes.json"), "w") as f:
        json.dump(exp, f, indent=1, sort_keys=True)


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).to(torch.bfloat16)


def gen_sharded(out):
    d = os.path.join(out, "sharded")
    model = tiny_llama()
    model.save_pretrained(d, max_shard_size="8KB")
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    shards = sorted(set(idx["weight_map"].values()))
    assert len(shards) >= 2, shards
    # Expected: what the real library reads from the shards.
    exp = {}
    for s in shards:
        for k, v in load_file(os.path.join(d, s)).items():
            exp[k] = {"shard": s, "dtype": "BF16", "shape": list(v.shape), "raw": hexbytes(v)}
    assert set(exp) == set(idx["weight_map"]), "weight_map and shards disagree"
    for k in list(os.listdir(d)):
        if not (k.endswith(".safetensors") or k.endswith(".index.json")):
            os.remove(os.path.join(d, k))
    with open(os.path.join(out, "sharded.json"), "w") as f:
        json.dump(exp, f, indent=1, sort_keys=True)
    # Broken indexes next to the good one.
    first = sorted(idx["weight_map"])[0]
    bad = json.loads(json.dumps(idx))
    bad["weight_map"]["lm_head.extra"] = "model-00009-of-00009.safetensors"
    json.dump(bad, open(os.path.join(d, "missing_shard.index.json"), "w"), indent=2)
    bad = json.loads(json.dumps(idx))
    bad["weight_map"]["model.layers.7.mlp.up_proj.weight"] = idx["weight_map"][first]
    json.dump(bad, open(os.path.join(d, "missing_weight.index.json"), "w"), indent=2)


def gen_metadata(out):
    save_file({"a": torch.ones(2)}, os.path.join(out, "meta_one.safetensors"),
              metadata={"format": "pt"})
    save_file({"a": torch.ones(2)}, os.path.join(out, "meta_none.safetensors"))


# Files written by the library that Ember's writer must reproduce byte for byte (the test reads
# each one, adds its tensors in reverse order and compares the serialised bytes).
def gen_writer(out):
    d = os.path.join(out, "writer")
    reset_dir(d)
    g = torch.Generator().manual_seed(7)
    mixed = {
        "zeta": torch.randn(3, 2, generator=g),
        "alpha": torch.randn(2, generator=g).to(torch.bfloat16),
        "b.weight": torch.randint(0, 9, (2, 2), generator=g),
        "mask": torch.tensor([True, False, True]),
        "fp8": torch.randn(5, generator=g).to(torch.float8_e4m3fn),
        "fp8b": torch.randn(3, generator=g).to(torch.float8_e5m2),
        "scale": torch.tensor([2.0, 0.5]).to(torch.float8_e8m0fnu),
        "half": torch.randn(1, 3, generator=g).to(torch.float16),
        "i8": torch.tensor([-3, 4], dtype=torch.int8),
        "u8": torch.tensor([200], dtype=torch.uint8),
        "i16": torch.tensor([-300], dtype=torch.int16),
        "i32": torch.tensor([1, 2, 3], dtype=torch.int32),
        "f64": torch.tensor([1.5], dtype=torch.float64),
        "u16": torch.tensor([7], dtype=torch.int32).to(torch.uint16),
        "u32": torch.tensor([7], dtype=torch.int64).to(torch.uint32),
        "u64": torch.tensor([7], dtype=torch.int64).to(torch.uint64),
        "scalar": torch.tensor(1.0),
        "empty": torch.zeros(0, 3),
        "Alpha": torch.zeros(1),
    }
    save_file(mixed, os.path.join(d, "mixed.safetensors"))
    save_file(mixed, os.path.join(d, "mixed_meta.safetensors"), metadata={"format": "pt"})
    save_file({"a": torch.zeros(1)}, os.path.join(d, "meta_empty.safetensors"), metadata={})
    names = {
        'quote"back\\slash/': torch.ones(1),
        "ctl\n\t\r\b\f\x01\x1f\x7f": torch.ones(2),
        "unicode é ✓ \U0001F600 \u2028": torch.ones(3),
    }
    save_file(names, os.path.join(d, "names.safetensors"), metadata={"k\x02\"": "v\u00e9\n"})
    save_file({}, os.path.join(d, "empty.safetensors"))
    # header padding: one file per residue of the header length modulo 8
    for r in range(8):
        save_file({"x" * (r + 1): torch.zeros(1)}, os.path.join(d, f"pad{r}.safetensors"))


def header_file(path, header, data=b"", n=None):
    if isinstance(header, (dict, list)):
        header = json.dumps(header, separators=(",", ":")).encode()
    elif isinstance(header, str):
        header = header.encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header) if n is None else n))
        f.write(header)
        f.write(data)


# name: (header, data, header_length_override or None, expected status, message fragments)
def malformed_cases():
    T = lambda dt, shape, b, e: {"dtype": dt, "shape": shape, "data_offsets": [b, e]}  # noqa
    good = {"a": T("F32", [2], 0, 8)}
    z8 = b"\0" * 8
    return {
        "too_small": (None, b"\x10\0\0", None, "format", ["fewer than the 8-byte"]),
        "header_too_large": ("{}", b"", 100_000_001, "format", ["100000000", "MAX_HEADER_SIZE"]),
        "header_past_eof": ('{"a":1}', b"", 4096, "format", ["runs past the end of the file"]),
        "bad_json": ('{"a": {"dtype": "F32",', b"", None, "format", ["not valid JSON"]),
        "not_object": ("[1,2,3]", b"", None, "format", ["JSON array, not an object"]),
        "bad_utf8": (b'{"\xff":{}}', b"", None, "format", ["not valid UTF-8"]),
        "duplicate_key": ('{"a":' + json.dumps(good["a"]) + ',"a":' + json.dumps(good["a"]) + "}",
                          z8, None, "format", ["duplicate"]),
        "unknown_dtype": ({"a": T("F12", [2], 0, 8)}, z8, None, "format",
                          ['tensor "a"', 'unknown dtype "F12"']),
        "dtype_not_string": ({"a": {"dtype": 5, "shape": [2], "data_offsets": [0, 8]}}, z8, None,
                             "format", ['tensor "a"', "dtype is a JSON integer"]),
        "missing_shape": ({"a": {"dtype": "F32", "data_offsets": [0, 8]}}, z8, None, "format",
                          ['tensor "a"', 'no "shape"']),
        "shape_negative": ({"a": T("F32", [-2], 0, 8)}, z8, None, "format",
                           ['tensor "a"', "shape[0] is negative"]),
        "shape_float": ({"a": T("F32", [2.5], 0, 8)}, z8, None, "format",
                        ['tensor "a"', "shape[0] is a JSON number"]),
        "offsets_one": ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}}, z8, None,
                        "format", ['tensor "a"', "data_offsets must be"]),
        "tensor_not_object": ({"a": 5}, b"", None, "format", ['tensor "a"', "not an object"]),
        "metadata_not_string": ({"__metadata__": {"k": 1}, **good}, z8, None, "format",
                                ['"__metadata__" entry "k"', "must be strings"]),
        "metadata_not_object": ({"__metadata__": [1], **good}, z8, None, "format",
                                ['"__metadata__" is a JSON array']),
        "overlap": ({"a": T("F32", [2], 0, 8), "b": T("F32", [2], 4, 12)}, b"\0" * 12, None,
                    "format", ['tensor "b"', "overlap", 'tensor "a"']),
        "gap": ({"a": T("F32", [2], 0, 8), "b": T("F32", [2], 12, 20)}, b"\0" * 20, None,
                "format", ['tensor "b"', "gap of 4 bytes"]),
        "first_not_zero": ({"a": T("F32", [2], 4, 12)}, b"\0" * 12, None, "format",
                           ['tensor "a"', "must start at offset 0"]),
        "end_before_begin": ({"a": T("F32", [0], 0, 0), "b": T("F32", [2], 8, 0)}, z8, None,
                             "format", ['tensor "b"', "end before they begin"]),
        "size_mismatch": ({"a": T("F32", [2, 3], 0, 20)}, b"\0" * 20, None, "format",
                          ['tensor "a"', "needs 24 bytes", "hold 20"]),
        "out_of_range": ({"a": T("F32", [2], 0, 8), "b": T("F32", [100], 8, 408)}, b"\0" * 64,
                         None, "format", ['tensor "b"', "run past the end of the data section"]),
        "trailing_bytes": (good, b"\0" * 12, None, "format", ["4 trailing bytes"]),
        "overflow_numel": ({"a": T("F32", [2**40, 2**40], 0, 8)}, z8, None, "overflow",
                           ['tensor "a"', "element count", "overflows"]),
        "overflow_bytes": ({"a": T("F64", [2**61], 0, 8)}, z8, None, "overflow",
                           ['tensor "a"', "byte size", "overflows"]),
        "subbyte": ({"a": T("F4", [3], 0, 2)}, b"\0\0", None, "format",
                    ['tensor "a"', "whole number of bytes"]),
    }


def gen_malformed(out):
    d = os.path.join(out, "malformed")
    reset_dir(d)
    manifest = {}
    for name, (header, data, n, status, needles) in malformed_cases().items():
        path = os.path.join(d, name + ".safetensors")
        if header is None:
            open(path, "wb").write(data)
        else:
            header_file(path, header, data, n)
        manifest[name] = {"status": status, "contains": needles}
    # a real file cut short in its data section
    good = os.path.join(d, "truncated.safetensors")
    save_file({"w": torch.arange(64, dtype=torch.float32)}, good)
    blob = open(good, "rb").read()
    open(good, "wb").write(blob[:-100])
    manifest["truncated"] = {"status": "format",
                             "contains": ['tensor "w"', "run past the end", "truncated?"]}
    # The reference library must reject every one of them as well, except a repeated tensor
    # name, which it reads as the last entry (serde map semantics) and Ember refuses as
    # ambiguous.
    lenient = {"duplicate_key"}
    for name in manifest:
        manifest[name]["library_accepts"] = name in lenient
        path = os.path.join(d, name + ".safetensors")
        try:
            with safe_open(path, "pt") as f:
                for k in f.keys():
                    f.get_tensor(k)
        except Exception:
            assert name not in lenient, name
            continue
        if name in lenient:
            continue
        raise SystemExit(f"safetensors accepted malformed fixture {name}")
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)


def gen_safetensors():
    out = os.path.join(FIX, "safetensors")
    reset_dir(out)
    gen_dtypes(out)
    gen_sharded(out)
    gen_metadata(out)
    gen_writer(out)
    gen_malformed(out)


# ---------------------------------------------------------------------------------------------
# config.json / generation_config.json
# ---------------------------------------------------------------------------------------------

ROPE_KEYS = ("rope_type", "rope_theta", "partial_rotary_factor", "factor",
             "original_max_position_embeddings", "low_freq_factor", "high_freq_factor",
             "beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate")
LAYER_TYPES = {"full_attention": 0, "sliding_attention": 1, "chunked_attention": 2,
               "linear_attention": 3}


def rope_expect(d):
    return {k: d[k] for k in ROPE_KEYS if d is not None and d.get(k) is not None}


def config_expect(cfg):
    """The values Ember's em_model_config must hold, read off the transformers config object
    (and, where the config leaves a value to the model, the expression the modeling code uses)."""
    t = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
    # Gemma 4's full-attention layers override head_dim (global_head_dim); the struct holds the
    # global (sliding-layer) values, as the class attributes do.
    t.allow_global_per_layer_attribute_access = True
    heads = t.num_attention_heads
    gemma = t.model_type.startswith("gemma")
    e = {
        "model_type": cfg.model_type,
        "text_model_type": t.model_type,
        "architectures": cfg.architectures or [],
        "vocab_size": t.vocab_size,
        "hidden_size": t.hidden_size,
        "intermediate_size": t.intermediate_size,
        "num_hidden_layers": t.num_hidden_layers,
        "num_attention_heads": heads,
        # modeling code: getattr(config, "head_dim", None) or hidden_size // heads
        "head_dim": getattr(t, "head_dim", None) or t.hidden_size // heads,
        "num_key_value_heads": getattr(t, "num_key_value_heads", None) or heads,
        "max_position_embeddings": t.max_position_embeddings,
        "hidden_act": t.hidden_activation if gemma else t.hidden_act,
        "attention_bias": bool(getattr(t, "attention_bias", False)),
        "mlp_bias": bool(getattr(t, "mlp_bias", False)),
        "tie_word_embeddings": t.tie_word_embeddings,
        "bos_token_id": t.bos_token_id,
        "pad_token_id": t.pad_token_id,
        "eos_token_ids": [] if t.eos_token_id is None else
        ([t.eos_token_id] if isinstance(t.eos_token_id, int) else list(t.eos_token_id)),
        "sliding_window": getattr(t, "sliding_window", None) or 0,
    }
    dt = t.dtype if t.dtype is not None else cfg.dtype
    e["dtype"] = str(dt).replace("torch.", "") if dt is not None else None
    if hasattr(t, "rms_norm_eps"):
        e["rms_norm_eps"] = t.rms_norm_eps
    if hasattr(t, "layer_norm_eps"):
        e["layer_norm_eps"] = t.layer_norm_eps
        e["type_vocab_size"] = t.type_vocab_size
    n = t.num_hidden_layers
    if getattr(t, "layer_types", None) is not None:
        lt = t.layer_types
    else:  # the model applies sliding_window (if any) to every layer
        lt = ["sliding_attention" if e["sliding_window"] else "full_attention"] * n
    e["layer_types"] = [LAYER_TYPES.get(x, 4) for x in lt]
    rp = getattr(t, "rope_parameters", None)
    if rp is not None:
        if "full_attention" in rp or "sliding_attention" in rp:
            e["rope"] = rope_expect(rp.get("full_attention"))
            e["rope_local"] = rope_expect(rp.get("sliding_attention"))
        else:
            e["rope"] = e["rope_local"] = rope_expect(rp)
    if t.model_type in ("qwen3_moe", "mixtral") or getattr(t, "enable_moe_block", False):
        e["num_experts"] = getattr(t, "num_local_experts", None) or getattr(t, "num_experts", 0)
        e["num_experts_per_tok"] = getattr(t, "num_experts_per_tok", None) or getattr(t, "top_k_experts", 0)
        e["moe_intermediate_size"] = getattr(t, "moe_intermediate_size", None) or 0
        e["norm_topk_prob"] = bool(getattr(t, "norm_topk_prob", False))
        e["decoder_sparse_step"] = getattr(t, "decoder_sparse_step", 1)
        e["mlp_only_layers"] = list(getattr(t, "mlp_only_layers", None) or [])
    if t.model_type == "gemma3_text":
        e["query_pre_attn_scalar"] = t.query_pre_attn_scalar
        e["final_logit_softcapping"] = t.final_logit_softcapping or 0
        e["attn_logit_softcapping"] = t.attn_logit_softcapping or 0
    if t.model_type == "gemma4_text":
        e["final_logit_softcapping"] = t.final_logit_softcapping or 0
        # full-attention layers' head size, which their rope uses
        plc = {int(k): v for k, v in (t.to_dict().get("per_layer_config") or {}).items()}
        full = [i for i, x in enumerate(t.layer_types) if x == "full_attention"]
        e["rope_head_dim"] = plc[full[0]]["head_dim"]
    return e


def config_cases():
    """name -> (config.json text, how it was made). Real classes' save_pretrained output, plus
    hand-written Hub-style files that lean on defaults and on the older key names."""
    from transformers import (BertConfig, Gemma3Config, Gemma3TextConfig, Gemma4Config,
                              Gemma4TextConfig, LlamaConfig, MistralConfig, MixtralConfig,
                              Qwen3Config, Qwen3MoeConfig)

    small = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                 num_attention_heads=4, max_position_embeddings=256)
    made = {
        "qwen3": Qwen3Config(**small, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True,
                             eos_token_id=[5, 6], bos_token_id=4, dtype="bfloat16",
                             architectures=["Qwen3ForCausalLM"]),
        "qwen3_sliding": Qwen3Config(**small, num_key_value_heads=2, use_sliding_window=True, sliding_window=32,
                                     max_window_layers=2),
        "qwen3_moe": Qwen3MoeConfig(**small, num_key_value_heads=2, num_experts=8,
                                    num_experts_per_tok=2, moe_intermediate_size=16,
                                    norm_topk_prob=True, mlp_only_layers=[0, 3],
                                    decoder_sparse_step=2),
        "llama": LlamaConfig(**small, num_key_value_heads=1, rope_parameters={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 128, "rope_theta": 500000.0},
            attention_bias=True, mlp_bias=True, pad_token_id=0),
        "llama_yarn": LlamaConfig(**small, rope_parameters={
            "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
            "beta_fast": 16.0, "beta_slow": 2.0, "rope_theta": 1e6, "attention_factor": 1.25}),
        "mistral": MistralConfig(**small, num_key_value_heads=2, sliding_window=64, head_dim=24),
        "mixtral": MixtralConfig(**small, num_key_value_heads=2, num_local_experts=4,
                                 num_experts_per_tok=2),
        "gemma3": Gemma3Config(text_config=Gemma3TextConfig(
            **small, num_key_value_heads=1, head_dim=16, sliding_window=32,
            query_pre_attn_scalar=16, final_logit_softcapping=30.0, attn_logit_softcapping=50.0,
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0,
                                                "rope_theta": 1e6},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
            architectures=["Gemma3ForConditionalGeneration"]),
        "gemma3_text": Gemma3TextConfig(**small, num_key_value_heads=2, head_dim=16,
                                        sliding_window_pattern=2),
        "gemma4": Gemma4Config(text_config=Gemma4TextConfig(**small, num_key_value_heads=2,
                                                            head_dim=16, sliding_window=16)),
        "bert": BertConfig(**small, type_vocab_size=3, layer_norm_eps=1e-5, hidden_act="gelu_new"),
    }
    out = {k: v.to_json_string() for k, v in made.items()}
    # Hub-style files: minimal ones rely on the class defaults, older ones use rope_theta,
    # rope_scaling, torch_dtype and a nested Gemma 3 config as google/gemma-3-4b-it ships it.
    for t in ("qwen3", "qwen3_moe", "llama", "mistral", "mixtral", "gemma3", "gemma3_text",
              "gemma4", "gemma4_text", "bert"):
        out[t + "_min"] = json.dumps({"model_type": t})
    out["qwen3_legacy"] = json.dumps({
        "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3,
        "rope_theta": 1000000, "rope_scaling": {"type": "yarn", "factor": 4.0,
                                                 "original_max_position_embeddings": 32768},
        "torch_dtype": "bfloat16", "eos_token_id": 151645, "sliding_window": None,
        "max_window_layers": 28, "use_sliding_window": False, "some_unknown_key": {"x": [1]}})
    out["llama_legacy"] = json.dumps({
        "model_type": "llama", "hidden_size": 64, "num_attention_heads": 8,
        "num_hidden_layers": 2, "num_key_value_heads": None, "head_dim": None,
        "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 32.0,
                                                  "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                  "original_max_position_embeddings": 8192},
        "max_position_embeddings": 131072, "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009], "torch_dtype": "bfloat16", "dtype": "float32"})
    out["gemma3_legacy"] = json.dumps({
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "boi_token_index": 255999, "eos_token_id": [1, 106], "torch_dtype": "bfloat16",
        "text_config": {"hidden_size": 64, "intermediate_size": 96, "model_type": "gemma3_text",
                        "num_hidden_layers": 7, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "head_dim": 16, "query_pre_attn_scalar": 16,
                        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                        "rope_theta": 1000000, "rope_local_base_freq": 10000,
                        "sliding_window": 1024, "sliding_window_pattern": 6,
                        "final_logit_softcapping": None, "attn_logit_softcapping": None,
                        "hidden_activation": "gelu_pytorch_tanh"},
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32,
                          "intermediate_size": 64, "num_hidden_layers": 1,
                          "num_attention_heads": 2}})
    return out


# Wrong types: each must be rejected by Ember with the key (and file) named. The manifest
# records whether transformers' strict config classes reject it too (they accept a few, e.g.
# keys they only pass on untyped, like the rope dict).
BAD_CONFIGS = {
    "hidden_size_string": ({"model_type": "qwen3", "hidden_size": "big"}, "hidden_size", True),
    "layers_bool": ({"model_type": "llama", "num_hidden_layers": True}, "num_hidden_layers", True),
    "head_dim_float": ({"model_type": "qwen3", "head_dim": 128.5}, "head_dim", True),
    "eps_string": ({"model_type": "mistral", "rms_norm_eps": "1e-6"}, "rms_norm_eps", True),
    "tie_int": ({"model_type": "qwen3", "tie_word_embeddings": 1}, "tie_word_embeddings", True),
    "eos_mixed": ({"model_type": "llama", "eos_token_id": [1, "a"]}, "eos_token_id", True),
    "act_int": ({"model_type": "bert", "hidden_act": 3}, "hidden_act", True),
    "layer_types_bogus": ({"model_type": "qwen3", "num_hidden_layers": 2,
                           "layer_types": ["full_attention", "bogus"]}, "layer_types", True),
    "layer_types_count": ({"model_type": "qwen3", "num_hidden_layers": 3,
                           "layer_types": ["full_attention"]}, "layer_types", True),
    "vocab_null": ({"model_type": "qwen3", "vocab_size": None}, "vocab_size", True),
    "nested_string": ({"model_type": "gemma3", "text_config": {"hidden_size": "x"}},
                      "text_config.hidden_size", True),
    "rope_factor_string": ({"model_type": "llama", "rope_scaling": {"rope_type": "linear",
                                                                    "factor": "8"}},
                           "rope_scaling.factor", False),
    "rope_not_object": ({"model_type": "llama", "rope_parameters": [1]}, "rope_parameters", True),
    "experts_list": ({"model_type": "qwen3_moe", "num_experts": [8]}, "num_experts", True),
    "mlp_only_string": ({"model_type": "qwen3_moe", "mlp_only_layers": "0"}, "mlp_only_layers",
                        True),
    "model_type_int": ({"model_type": 3}, "model_type", False),
    "heads_not_divisible": ({"model_type": "llama", "num_attention_heads": 6,
                             "num_key_value_heads": 4, "hidden_size": 48}, "num_key_value_heads",
                            False),
}

GEN_CASES = {
    "qwen3": dict(do_sample=True, temperature=0.6, top_k=20, top_p=0.95, min_p=0.0,
                  repetition_penalty=1.05, max_new_tokens=256, bos_token_id=151643,
                  pad_token_id=151643, eos_token_id=[151645, 151643]),
    "greedy": dict(eos_token_id=2, bos_token_id=1, max_length=4096),
    "empty": dict(),
}


def gen_expect(g):
    from transformers import GenerationConfig

    d = GenerationConfig._get_default_generation_params()
    get = lambda k: getattr(g, k) if getattr(g, k) is not None else d.get(k)  # noqa: E731
    eos = g.eos_token_id
    return {
        "do_sample": get("do_sample"), "temperature": get("temperature"), "top_k": get("top_k"),
        "top_p": get("top_p"), "min_p": g.min_p or 0.0,
        "repetition_penalty": get("repetition_penalty"),
        "max_new_tokens": g.max_new_tokens if g.max_new_tokens is not None else -1,
        "max_length": get("max_length"),
        "bos_token_id": g.bos_token_id if g.bos_token_id is not None else -1,
        "pad_token_id": g.pad_token_id if g.pad_token_id is not None else -1,
        "eos_token_ids": [] if eos is None else ([eos] if isinstance(eos, int) else list(eos)),
    }


def gen_config():
    import transformers
    from transformers import AutoConfig, GenerationConfig

    transformers.logging.set_verbosity_error()
    out = os.path.join(FIX, "config")
    reset_dir(out)
    for name, text in config_cases().items():
        d = os.path.join(out, name)
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(text)
        cfg = AutoConfig.from_pretrained(d)
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(config_expect(cfg), f, indent=1, sort_keys=True)
        # what generate() would use without a generation_config.json
        g = GenerationConfig.from_model_config(cfg)
        with open(os.path.join(d, "generation_expected.json"), "w") as f:
            json.dump(gen_expect(g), f, indent=1, sort_keys=True)
    bad = os.path.join(out, "bad")
    os.makedirs(bad)
    manifest = {}
    for name, (cfg, key, _) in BAD_CONFIGS.items():
        d = os.path.join(bad, name)
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        try:
            AutoConfig.from_pretrained(d)
            rejected = False
        except Exception:
            rejected = True
        manifest[name] = {"key": key, "transformers_rejects": rejected}
    with open(os.path.join(bad, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    gd = os.path.join(out, "generation")
    os.makedirs(gd)
    for name, kw in GEN_CASES.items():
        d = os.path.join(gd, name)
        GenerationConfig(**kw).save_pretrained(d)
        g = GenerationConfig.from_pretrained(d)
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(gen_expect(g), f, indent=1, sort_keys=True)
    d = os.path.join(gd, "bad_temperature")
    os.makedirs(d)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"temperature": "hot", "do_sample": True}, f)


def main():
    want = sys.argv[1:] or ["safetensors", "config"]
    if "safetensors" in want:
        gen_safetensors()
    if "config" in want:
        gen_config()


if __name__ == "__main__":
    main()
