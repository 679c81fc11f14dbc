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


def gen_config():
    pass


def main():
    want = sys.argv[1:] or ["safetensors", "config"]
    if "safetensors" in want:
        gen_safetensors()
    if "config" in want:
        gen_config()


if __name__ == "__main__":
    main()
