#!/usr/bin/env python3
"""Generates the GGUF fixtures in tests/fixtures/gguf/ with the real `gguf` package (pinned in
scripts/requirements-fixtures.txt), and the seed corpus of fuzz/fuzz_gguf.c.

Usage: /opt/refvenv/bin/python scripts/gen_gguf_fixtures.py [types] [tokenizers] [models]
           [--smollm2 $(scripts/fetch_smollm2.sh)]

  types.gguf + types.{json,bin}  one tensor of every type Ember loads (written by GGUFWriter;
                                 quantized with gguf.quants.quantize where the package can, random
                                 blocks with finite scales for the K types) and the f32 values
                                 gguf.quants.dequantize gives for each; two types Ember refuses.
  meta.gguf, meta_v2.gguf        every metadata value type, nested arrays included, and
  meta.json                      the values the package's GGUFReader reads back.
  align1.gguf                    general.alignment = 1: f32 data at odd offsets.
  malformed/*.gguf               one file per validation failure, built field by field below,
  malformed.json                 with the status Ember must report and a word its message
                                 must contain.
  tok_*.gguf, tokenizers.json    tokenizers written as llama.cpp's converter does (the small
                                 tokenizers of tests/fixtures/tokenizers/ as gpt2 vocabularies
                                 with several tokenizer.ggml.pre, llama vocabularies with merges
                                 and with scores only, a gemma3 one), and what transformers builds
                                 from each: ids of a few hundred strings with and without special
                                 tokens, decoded text, rendered chat templates.
  real_smollm2_tokenizer.json    the same for the real SmolLM2-135M-Instruct GGUF (--smollm2).
  model_*.gguf, models.{json,bin}  tiny models of each architecture written as llama.cpp's
                                 converter does, with logits and greedy tokens.
  real_smollm2.{json,bin}        transformers on the real SmolLM2 GGUF (--smollm2): logits and
                                 greedy continuations of five chat questions.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np
import torch

import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from common import Bundle  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "gguf")
CORPUS = os.path.join(HERE, "..", "fuzz", "corpus", "gguf")
RNG = np.random.default_rng(17)


def reset_dir(d):
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)


# ---- types.gguf -----------------------------------------------------------------------------

def finite_f16(n, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, n).astype(np.float16).view(np.uint8).reshape(n, 2)


def k_blocks(qtype, rows, cols):
    """Random K-quant blocks whose f16 fields are finite (the package cannot quantize K types)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // block
    b = RNG.integers(0, 256, (nb, size), dtype=np.uint8)
    if qtype in (Q.Q4_K, Q.Q5_K):
        b[:, 0:2] = finite_f16(nb, 0.0, 0.05)
        b[:, 2:4] = finite_f16(nb, 0.0, 0.05)
    elif qtype == Q.Q6_K:
        b[:, 208:210] = finite_f16(nb, -0.05, 0.05)
    elif qtype in (Q.Q2_K,):
        b[:, 80:84] = np.concatenate([finite_f16(nb), finite_f16(nb)], axis=1)
    return b.reshape(rows, -1)


def gen_types():
    w = gguf.GGUFWriter(os.path.join(OUT, "types.gguf"), "test")
    w.add_string("general.name", "ember type fixtures")
    bundle = Bundle(os.path.join(OUT, "types"))
    rows, cols = 3, 512
    x = (RNG.standard_normal((rows, cols)) * 0.7).astype(np.float32)
    x[0, :7] = [0.0, -0.0, 1e-8, -3.5, 3.5, 65504.0, -1e-3]  # edges of the 8-bit ranges
    tensors = {}
    tensors["t.f32"] = (x, None)
    tensors["t.f16"] = (x.astype(np.float16), None)
    for qt in (Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1):
        tensors["t." + qt.name.lower()] = (gguf.quants.quantize(x, qt), qt)
    for qt in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        tensors["t." + qt.name.lower()] = (k_blocks(qt, rows, cols), qt)
    # shapes other than 2-D
    tensors["t3.q8_0"] = (gguf.quants.quantize(x.reshape(2, 3, 256)[:, :, :64].copy(), Q.Q8_0),
                          Q.Q8_0)
    tensors["t1.f32"] = (np.arange(5, dtype=np.float32) - 2.5, None)
    # recognised ggml types that Ember refuses by name
    tensors["u.q2_k"] = (k_blocks(Q.Q2_K, 1, 256), Q.Q2_K)
    tensors["u.iq4_nl"] = (RNG.integers(0, 256, (1, 18), dtype=np.uint8), Q.IQ4_NL)
    for name, (data, qt) in tensors.items():
        w.add_tensor(name, data, raw_dtype=qt)
        if name.startswith("u."):
            continue
        deq = gguf.quants.dequantize(data, qt if qt is not None else
                                     (Q.F32 if data.dtype == np.float32 else Q.F16))
        bundle.add("deq." + name, torch.from_numpy(np.ascontiguousarray(deq, dtype=np.float32)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    # what the package's reader sees (types and shapes, in Ember's outermost-first order)
    r = gguf.GGUFReader(os.path.join(OUT, "types.gguf"))
    bundle.meta = {"tensors": {t.name: {"type": t.tensor_type.name,
                                        "shape": [int(s) for s in reversed(t.shape)],
                                        "nbytes": int(t.n_bytes),
                                        "offset": int(t.data_offset)}
                               for t in r.tensors}}
    bundle.write()


# ---- meta.gguf ------------------------------------------------------------------------------

META = [  # key, value, type, array element type
    ("k.u8", 200, V.UINT8, None), ("k.i8", -100, V.INT8, None),
    ("k.u16", 60000, V.UINT16, None), ("k.i16", -30000, V.INT16, None),
    ("k.u32", 4000000000, V.UINT32, None), ("k.i32", -2000000000, V.INT32, None),
    ("k.f32", 0.1, V.FLOAT32, None), ("k.bool", True, V.BOOL, None),
    ("k.str", "héllo wörld ✓", V.STRING, None), ("k.empty", "", V.STRING, None),
    ("k.u64", 2**63 + 5, V.UINT64, None), ("k.i64", -(2**62), V.INT64, None),
    ("k.f64", 1.0 / 3.0, V.FLOAT64, None),
    ("a.i32", [1, -2, 3], V.ARRAY, V.INT32), ("a.f32", [0.5, -1.25], V.ARRAY, V.FLOAT32),
    ("a.bool", [True, False, True], V.ARRAY, V.BOOL), ("a.u8", [0, 255], V.ARRAY, V.UINT8),
    ("a.i64", [-(2**40), 7], V.ARRAY, V.INT64), ("a.f64", [2.5e-300], V.ARRAY, V.FLOAT64),
    ("a.str", ["a", "", "ünï"], V.ARRAY, V.STRING),
    ("a.nested", [[1, 2, 3], [4]], V.ARRAY, V.ARRAY),
    ("a.nested_str", [["x", "y"], ["z"]], V.ARRAY, V.ARRAY),
    ("a.deep", [[[5, 6]], [[7]]], V.ARRAY, V.ARRAY),
]


def flatten(v):
    return [y for x in v for y in flatten(x)] if isinstance(v, list) else [v]


def gen_meta():
    path = os.path.join(OUT, "meta.gguf")
    w = gguf.GGUFWriter(path, "test")
    for key, value, vtype, sub in META:
        w.add_key_value(key, value, vtype, sub_type=sub)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[4:8] = struct.pack("<I", 2)  # v2 and v3 differ only in the version number
    with open(os.path.join(OUT, "meta_v2.gguf"), "wb") as f:
        f.write(data)
    # Values as the package's GGUFReader reads them. It flattens arrays of arrays, so their
    # nesting comes from what was written, checked against the reader's flat contents.
    r = gguf.GGUFReader(path)
    written = {k: v for k, v, _, _ in META}
    doc = {}
    for field in r.fields.values():
        if field.name.startswith("GGUF."):
            continue
        types = [V(t).name.lower() for t in field.types]
        value = to_json(field.contents())
        if len(types) > 2:
            assert to_json(flatten(written[field.name])) == value, field.name
            value = to_json(written[field.name])
        doc[field.name] = {"types": types, "value": value}
    with open(os.path.join(OUT, "meta.json"), "w") as f:
        json.dump({"keys": doc, "order": [k for k in r.fields if not k.startswith("GGUF.")]},
                  f, indent=1, ensure_ascii=False)
        f.write("\n")


def to_json(v):
    if isinstance(v, (list, tuple)):
        return [to_json(x) for x in v]
    if isinstance(v, (np.integer, int)) and not isinstance(v, (bool, np.bool_)):
        return int(v) if int(v) < 2**63 else str(int(v))  # JSON readers stop at int64
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, bytes):
        return v.decode("utf-8")
    return v


# ---- align1.gguf ----------------------------------------------------------------------------

def gen_align1():
    path = os.path.join(OUT, "align1.gguf")
    w = gguf.GGUFWriter(path, "test")
    w.add_custom_alignment(1)
    w.add_tensor("a", np.array([1, 2, 3], dtype=np.float16))
    w.add_tensor("b", np.array([0.25, -8.0, 3.0e38], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = gguf.GGUFReader(path)
    b = [t for t in r.tensors if t.name == "b"][0]
    assert b.data_offset % 4 != 0, "the f32 tensor should sit at an unaligned offset"


# ---- malformed files, field by field ---------------------------------------------------------

def s(x):
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def ti(name, dims, qtype, offset):
    return (s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
            + struct.pack("<IQ", qtype, offset))


def build(kvs=(), tis=(), data=b"", version=3, n_kv=None, n_t=None, align=32, magic=b"GGUF"):
    head = magic + struct.pack("<IQQ", version, len(tis) if n_t is None else n_t,
                               len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tis)
    pad = (-len(body)) % align
    return body + b"\0" * pad + data


F32 = int(Q.F32)
GOOD_T = [ti("w", [8], F32, 0)]
GOOD_D = struct.pack("<8f", *range(8))
NAME_KV = kv("general.name", V.STRING, s("x"))


def nested(depth):
    p = struct.pack("<IQ", V.INT32, 1) + struct.pack("<i", 1)
    for _ in range(depth - 1):
        p = struct.pack("<IQ", V.ARRAY, 1) + p
    return p


def malformed_cases():
    good = build([NAME_KV], GOOD_T, GOOD_D)
    c = {}
    c["bad_magic"] = (build([NAME_KV], GOOD_T, GOOD_D, magic=b"GGUX"), "format", "GGUF")
    c["short"] = (b"GGU", "format", "fewer than 4 bytes")
    c["version1"] = (build([NAME_KV], GOOD_T, GOOD_D, version=1), "unsupported", "version 1")
    c["version4"] = (build([NAME_KV], GOOD_T, GOOD_D, version=4), "unsupported", "version 4")
    c["version0"] = (build([NAME_KV], GOOD_T, GOOD_D, version=0), "format", "version 0")
    be = bytearray(good)
    be[4:8] = struct.pack(">I", 3)
    c["big_endian"] = (bytes(be), "unsupported", "big-endian")
    c["trunc_header"] = (good[:12], "format", "truncated")
    c["trunc_kv"] = (build([NAME_KV])[:24 + 20], "format", "truncated")  # inside the pair
    c["trunc_tensor_info"] = (good[:len(good) - len(GOOD_D) - 20], "format", "truncated")
    c["trunc_data"] = (good[:-4], "format", "past its end")
    c["kv_count_huge"] = (build([NAME_KV], GOOD_T, GOOD_D, n_kv=2**62), "format",
                          "key/value pairs cannot fit")
    c["tensor_count_huge"] = (build([NAME_KV], GOOD_T, GOOD_D, n_t=2**61), "format",
                              "tensors cannot fit")
    c["key_len_huge"] = (build([struct.pack("<Q", 2**64 - 1) + b"k"], [], b""), "format",
                         "has length 18446744073709551615")
    c["str_len_huge"] = (build([s("k") + struct.pack("<IQ", V.STRING, 2**40) + b"abc"]),
                         "format", "has length")
    c["array_count_huge"] = (build([kv("k", V.ARRAY, struct.pack("<IQ", V.UINT64, 2**61))]),
                             "format", "claims 2305843009213693952 elements")
    c["array_of_str_count_huge"] = (build([kv("k", V.ARRAY, struct.pack("<IQ", V.STRING, 2**40))]),
                                    "format", "claims")
    c["value_type_unknown"] = (build([kv("k", 13, b"\0" * 8)]), "format", "value type 13")
    c["array_type_unknown"] = (build([kv("k", V.ARRAY, struct.pack("<IQ", 99, 1) + b"\0")]),
                               "format", "element type 99")
    c["bool_two"] = (build([kv("k", V.BOOL, b"\x02")]), "format", "not 0 or 1")
    c["bool_array_two"] = (build([kv("k", V.ARRAY, struct.pack("<IQ", V.BOOL, 2) + b"\x01\x07")]),
                           "format", "not 0 or 1")
    c["nested_too_deep"] = (build([kv("k", V.ARRAY, nested(70))]), "format", "nested deeper")
    c["dup_key"] = (build([NAME_KV, NAME_KV], GOOD_T, GOOD_D), "format", "defined twice")
    c["align_zero"] = (build([kv("general.alignment", V.UINT32, struct.pack("<I", 0))], GOOD_T,
                             GOOD_D), "format", "not a power of two")
    c["align_48"] = (build([kv("general.alignment", V.UINT32, struct.pack("<I", 48))], GOOD_T,
                           GOOD_D, align=48), "format", "not a power of two")
    c["align_u64"] = (build([kv("general.alignment", V.UINT64, struct.pack("<Q", 32))], GOOD_T,
                            GOOD_D), "format", "uint32")
    c["ndims_zero"] = (build([NAME_KV], [ti("w", [], F32, 0)], GOOD_D), "format", "0 dimensions")
    c["ndims_five"] = (build([NAME_KV], [ti("w", [1, 1, 1, 1, 8], F32, 0)], GOOD_D), "format",
                       "5 dimensions")
    c["dim_negative"] = (build([NAME_KV], [ti("w", [2**63 + 1], F32, 0)], GOOD_D), "format",
                         "negative")
    c["numel_overflow"] = (build([NAME_KV], [ti("w", [2**32, 2**32], F32, 0)], GOOD_D),
                           "overflow", "overflows")
    c["nbytes_overflow"] = (build([NAME_KV], [ti("w", [2**62], F32, 0)], GOOD_D),
                            "overflow", "overflows")
    c["tensor_type_unknown"] = (build([NAME_KV], [ti("w", [8], 99, 0)], GOOD_D), "format",
                                "type 99")
    c["tensor_type_removed"] = (build([NAME_KV], [ti("w", [32], 4, 0)], GOOD_D), "format",
                                "type 4")
    c["row_not_blocks"] = (build([NAME_KV], [ti("w", [48], int(Q.Q4_0), 0)], b"\0" * 64),
                           "format", "block size 32")
    c["offset_misaligned"] = (build([NAME_KV], [ti("w", [4], F32, 16)], GOOD_D + GOOD_D),
                              "format", "not a multiple of the alignment")
    c["out_of_bounds"] = (build([NAME_KV], [ti("w", [8], F32, 32)], GOOD_D), "format",
                          "past its end")
    c["offset_huge"] = (build([NAME_KV], [ti("w", [8], F32, 2**64 - 32)], GOOD_D), "format",
                        "past its end")
    c["overlap"] = (build([NAME_KV], [ti("a", [8], F32, 0), ti("b", [4], F32, 0)], GOOD_D),
                    "format", "overlap")
    c["overlap_tail"] = (build([NAME_KV], [ti("a", [16], F32, 0), ti("b", [8], F32, 32)],
                               GOOD_D * 3), "format", "overlap")
    c["dup_tensor"] = (build([NAME_KV], [ti("w", [8], F32, 0), ti("w", [8], F32, 32)],
                             GOOD_D + b"\0" * 32), "format", "two tensors")
    c["data_past_end"] = (b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + ti("w", [8], F32, 0),
                          "format", "past the end")
    # zero bytes of tensor data, but still no room for the padding before the data section
    c["empty_past_end"] = (b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + ti("w", [8, 0], F32, 0),
                           "format", "past the end")
    return c


def gen_malformed():
    d = os.path.join(OUT, "malformed")
    reset_dir(d)
    doc = {}
    for name, (data, status, needle) in malformed_cases().items():
        with open(os.path.join(d, name + ".gguf"), "wb") as f:
            f.write(data)
        try:  # the package's reader, for the record (it checks less than Ember)
            gguf.GGUFReader(os.path.join(d, name + ".gguf"))
            pkg = "accepted"
        except Exception as e:  # noqa: BLE001
            pkg = "rejected: " + type(e).__name__
        doc[name] = {"status": status, "contains": needle, "gguf_reader": pkg}
    with open(os.path.join(OUT, "malformed.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return malformed_cases()


def gen_corpus(cases):
    reset_dir(CORPUS)
    for name in ("meta.gguf", "meta_v2.gguf", "align1.gguf"):
        shutil.copy(os.path.join(OUT, name), os.path.join(CORPUS, name))
    for name in ("overlap", "dup_key", "nested_too_deep", "row_not_blocks", "trunc_data",
                 "empty_past_end"):
        with open(os.path.join(CORPUS, name + ".gguf"), "wb") as f:
            f.write(cases[name][0])
    # a small valid file with quantized tensors
    w = gguf.GGUFWriter(os.path.join(CORPUS, "quant.gguf"), "llama")
    w.add_key_value("llama.block_count", 1, V.UINT32)
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    for qt in (Q.Q4_0, Q.Q8_0, Q.Q5_1):
        w.add_tensor("q." + qt.name, gguf.quants.quantize(x, qt), raw_dtype=qt)
    w.add_tensor("k.Q6_K", k_blocks(Q.Q6_K, 1, 256), raw_dtype=Q.Q6_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---- tokenizers ------------------------------------------------------------------------------

TOKFIX = os.path.join(HERE, "..", "tests", "fixtures", "tokenizers")
CHATS = [
    [{"role": "user", "content": "Hi there!"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 12 + 30?"},
     {"role": "assistant", "content": "42."}, {"role": "user", "content": "Why?\n  Explain."}],
    [{"role": "user", "content": "Code: `def f(x):\n\treturn x**2`  <think> ok </think>"}],
]
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def tok_strings():
    """A few hundred strings: the tokenizer tests' texts, their lines and words, and edges."""
    with open(os.path.join(TOKFIX, "texts.json"), encoding="utf-8") as f:
        texts = [t["text"] for t in json.load(f)]
    out = list(texts)
    for t in texts:
        out += [ln for ln in t.split("\n") if ln][:6]
        words = t.split(" ")
        out += [" ".join(words[i:i + 3]) for i in range(0, min(len(words), 24), 3)]
    out += ["", " ", "  ", "\n", "\n\n\n", "\t\t x", "   leading", "trailing   ", "a\r\nb",
            "0", "7", "42", "123", "1234", "12345", " 2024", "3.14159", "1,000,000", "x1y22z333",
            "日本語のテキスト", "Ünïcödé ñ", "emoji 😀👍🏽", "مرحبا بالعالم", "नमस्ते",
            "<|im_start|>user\nhi<|im_end|>", "<think>x</think>", "<|endoftext|><|endoftext|>",
            "<s>hello</s>", "<bos>a<eos>", "don't won't I'M", "    def f():\n        pass",
            "\u00a0nbsp\u2009thin", "ﬁ ligature", "e\u0301 combining"]
    rng = np.random.default_rng(5)  # mixtures of the pieces above, for the rest
    pieces = ["the", "The", " cat", "  ", " ", "\n", "\t", "123", "4", "56789", "'s", "'LL",
              "é", "日本", "😀", "--", "!!", "?", "(x)", "<|im_end|>", "<think>", "▁", "ß",
              "ǅ", "\u0301", "foo_bar", "camelCase", "URL: http://a.b/c?d=1", "ūnī", "  \n "]
    for _ in range(130):
        k = int(rng.integers(2, 9))
        out.append("".join(pieces[int(i)] for i in rng.integers(0, len(pieces), k)))
    seen, res = set(), []
    for x in out:
        if x not in seen:
            seen.add(x)
            res.append(x)
    return res


def gguf_from_tokenizer_json(path, src, model, arch="llama", pre=None, add_bos=None,
                             add_eos=None, bos=None, eos=None, unk=None, pad=None, merges=True,
                             scores=False, extra=(), blank_as_space=False, tpl=CHATML):
    """A GGUF holding the tokenizer of tests/fixtures/tokenizers/<src> as llama.cpp's converter
    writes one: tokens in id order, token types (3 control for special added tokens, 4
    user-defined for the others, 6 for <0xXX>, 2 for <unk>), merges or scores."""
    with open(os.path.join(TOKFIX, src), encoding="utf-8") as f:
        d = json.load(f)
    vocab = d["model"]["vocab"]
    n = max(list(vocab.values()) + [a["id"] for a in d["added_tokens"]]) + 1
    toks, types = [None] * n, [1] * n
    for t, i in vocab.items():
        toks[i] = t
    for a in d["added_tokens"]:
        toks[a["id"]] = a["content"]
        types[a["id"]] = 3 if a["special"] else 4
    for i, t in enumerate(toks):
        if t is None:
            toks[i], types[i] = f"[PAD{i}]", 5
        elif len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            types[i] = 6
        elif t == "<unk>":
            types[i] = 2
        if blank_as_space and t and len(t) > 1 and set(t) == {"\u2581"}:
            toks[i] = " " * len(t)  # Gemma files store blank tokens as spaces
    for t, ty in extra:
        toks.append(t)
        types.append(ty)
    w = gguf.GGUFWriter(path, arch)
    w.add_string("tokenizer.ggml.model", model)
    if pre:
        w.add_string("tokenizer.ggml.pre", pre)
    w.add_token_list(toks)
    w.add_token_types(types)
    if scores:
        w.add_token_scores([float(-i) * 0.5 for i in range(len(toks))])
    if merges:
        w.add_token_merges([m if isinstance(m, str) else " ".join(m)
                            for m in d["model"]["merges"]])
    for key, v in (("bos", bos), ("eos", eos), ("unk", unk), ("pad", pad)):
        if v is not None:
            getattr(w, {"bos": "add_bos_token_id", "eos": "add_eos_token_id",
                        "unk": "add_unk_token_id", "pad": "add_pad_token_id"}[key])(v)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    if add_eos is not None:
        w.add_add_eos_token(add_eos)
    if tpl:
        w.add_chat_template(tpl)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tok_expectations(path, strings):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    be = tok.backend_tokenizer
    cases = []  # per string; decoded text only where it is not the string itself
    for s in strings:
        with_sp = be.encode(s, add_special_tokens=True).ids
        assert tok(s).input_ids == with_sp
        plain = be.encode(s, add_special_tokens=False).ids
        dec, dec_skip = (be.decode(plain, skip_special_tokens=False),
                         be.decode(with_sp, skip_special_tokens=True))
        cases.append([plain, with_sp, None if dec == s else dec,
                      None if dec_skip == s else dec_skip])
    chats = []
    if tok.chat_template:
        for conv in CHATS:
            text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
            chats.append({"messages": conv, "text": text,
                          "ids": be.encode(text, add_special_tokens=False).ids})
    sp = {k: getattr(tok, k) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
    return {"cases": cases, "chats": chats, "special": sp,
            "add_bos": bool(getattr(tok, "add_bos_token", False)),
            "vocab_size": be.get_vocab_size(with_added_tokens=True),
            "pipeline": json.loads(be.to_str())["pre_tokenizer"]}


TOKENIZERS = {  # name: (source tokenizer.json, GGUF options)
    "gpt2_smollm": ("bpe_bytelevel.json", dict(model="gpt2", pre="smollm", add_bos=False,
                                               bos=1, eos=2, unk=0, pad=2,
                                               extra=[("<ctl\u2713>", 3)])),
    "gpt2_llama_bpe": ("bpe_bytelevel.json", dict(model="gpt2", pre="llama-bpe", add_bos=True,
                                                  bos=0, eos=1)),
    "gpt2_qwen2": ("bpe_bytelevel.json", dict(model="gpt2", arch="qwen2", pre="qwen2", eos=2,
                                              add_eos=True, bos=1)),
    "gpt2_gpt2": ("bpe_bytelevel.json", dict(model="gpt2", pre="gpt-2", bos=0, eos=0)),
    "llama_merges": ("bpe_llama2_style.json", dict(model="llama", bos=2, eos=1, unk=3,
                                                   scores=True)),
    "llama_scores": ("bpe_llama2_style.json", dict(model="llama", bos=2, eos=1, unk=3,
                                                   scores=True, merges=False, add_bos=False)),
    "gpt2_llama3": ("bpe_llama3_style.json", dict(model="gpt2", pre="llama-bpe", add_bos=True,
                                                  bos=0, eos=1)),
    "llama_no_s": ("bpe_gemma_style.json", dict(model="llama", bos=2, eos=1, unk=3, scores=True,
                                                merges=False)),
    "gemma3": ("bpe_gemma_style.json", dict(model="llama", arch="gemma3", bos=2, eos=1, unk=3,
                                            pad=0, merges=False, scores=True, add_bos=True,
                                            blank_as_space=True, extra=[("\u2581\u2581", 1)])),
}


def gen_tokenizers(real_gguf=None):
    strings = tok_strings()
    expected = {"texts": strings, "tokenizers": {}}
    for name, (src, opts) in TOKENIZERS.items():
        path = os.path.join(OUT, f"tok_{name}.gguf")
        gguf_from_tokenizer_json(path, src, **opts)
        expected["tokenizers"][name] = tok_expectations(path, strings)
    with open(os.path.join(OUT, "tokenizers.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    if real_gguf:  # only the expectations are committed, never the model file
        exp = {"texts": strings, "tokenizers": {"smollm2": tok_expectations(real_gguf, strings)}}
        with open(os.path.join(OUT, "real_smollm2_tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(exp, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")


# ---- models -----------------------------------------------------------------------------------

MODEL_IDS = [1, 17, 250, 3, 99, 42, 7, 128, 64, 200, 5, 31]


def tiny_models():
    """Tiny random models of each architecture Ember reads from GGUF, in configurations a GGUF
    file can state (defaults where the file says nothing)."""
    import transformers as T
    base = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                rms_norm_eps=1e-5)
    return {
        "llama": (T.LlamaConfig(**base, head_dim=16, rope_theta=10000.0,
                                tie_word_embeddings=True), T.LlamaForCausalLM, "llama"),
        "qwen2": (T.Qwen2Config(**base, rope_theta=1e6, tie_word_embeddings=False),
                  T.Qwen2ForCausalLM, "qwen2"),
        # head_dim 128 as every Qwen3: transformers does not read key_length for qwen3 files
        "qwen3": (T.Qwen3Config(**dict(base, num_attention_heads=2, num_key_value_heads=1),
                                head_dim=128, rope_theta=1e6, tie_word_embeddings=True),
                  T.Qwen3ForCausalLM, "qwen3"),
        "qwen3moe": (T.Qwen3MoeConfig(**base, head_dim=16, rope_theta=1e6, num_experts=4,
                                      num_experts_per_tok=2, moe_intermediate_size=32,
                                      norm_topk_prob=True, tie_word_embeddings=False),
                     T.Qwen3MoeForCausalLM, "qwen3moe"),
        "mixtral": (T.MixtralConfig(**dict(base, intermediate_size=32), head_dim=16,
                                    rope_theta=1e6, num_local_experts=4, num_experts_per_tok=2,
                                    tie_word_embeddings=False), T.MixtralForCausalLM, "llama"),
        # query_pre_attn_scalar = head_dim: what llama.cpp assumes (the file does not say)
        "gemma3": (T.Gemma3TextConfig(**base, head_dim=16, rope_theta=1e6, sliding_window=8,
                                      query_pre_attn_scalar=16, tie_word_embeddings=True),
                   T.Gemma3ForCausalLM, "gemma3"),
    }


def llama_permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py LlamaModel.permute."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_model_gguf(path, name, cfg, model, arch, qtype=None):
    """The model as llama.cpp's converter writes it: gguf-py's tensor names, q/k rows permuted
    (llama), norms + 1 (gemma3), experts split and stacked, 2-D weights as qtype (default Q8_0;
    quantized with gguf.quants.quantize), norms in F32. Returns {hf name: the weight the file holds, as
    transformers dequantizes it (before undoing llama.cpp's transforms)}."""
    march = [k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch][0]
    nmap = gguf.get_tensor_name_map(march, cfg.num_hidden_layers)
    w = gguf.GGUFWriter(path, arch)
    w.add_name(name)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    rp = cfg.rope_parameters
    w.add_rope_freq_base((rp["full_attention"] if "full_attention" in rp else rp)["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if arch == "llama":
        w.add_rope_dimension_count(hd)
    if arch in ("qwen3", "qwen3moe", "gemma3"):
        w.add_key_length(hd)
        w.add_value_length(hd)
    if arch == "gemma3":
        w.add_sliding_window(cfg.sliding_window)
    experts = getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", None)
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(cfg.num_experts_per_tok)
        if arch == "qwen3moe":
            w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    stored = {}
    qtype = Q.Q8_0 if qtype is None else qtype

    def put(gname, t, hf_name):
        a = t.detach().float().numpy()
        if a.ndim >= 2 and a.shape[-1] % 32 == 0:
            q = gguf.quants.quantize(a, qtype)
            w.add_tensor(gname, q, raw_dtype=qtype)
            deq = torch.from_numpy(gguf.quants.dequantize(q, qtype).reshape(a.shape).copy())
        else:
            w.add_tensor(gname, a.astype(np.float32))
            deq = torch.from_numpy(a.copy())
        stored.setdefault(hf_name, []).append(deq)

    for hf, t in model.state_dict().items():
        if hf == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        base, suffix = hf.rsplit(".", 1) if hf.endswith((".weight", ".bias")) else (hf, "")
        if base.endswith("experts.gate_up_proj") or base.endswith("experts.down_proj"):
            layer = int(hf.split(".")[2])
            if base.endswith("gate_up_proj"):
                inter = t.shape[1] // 2
                put(f"blk.{layer}.ffn_gate_exps.weight", t[:, :inter], hf)
                put(f"blk.{layer}.ffn_up_exps.weight", t[:, inter:], hf)
            else:
                put(f"blk.{layer}.ffn_down_exps.weight", t, hf)
            continue
        gname = nmap.get_name(base)
        assert gname, hf
        if arch == "llama" and base.endswith("q_proj"):
            t = llama_permute(t, cfg.num_attention_heads, cfg.num_attention_heads)
        if arch == "llama" and base.endswith("k_proj"):
            t = llama_permute(t, cfg.num_attention_heads, cfg.num_key_value_heads)
        if arch == "gemma3" and hf.endswith("norm.weight"):
            t = t + 1
        put(gname + "." + suffix, t, hf)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


def gen_models(bf16=False):
    """The tiny models with Q8_0 matrices (models), or the llama one with BF16 matrices, as
    convert_hf_to_gguf.py --outtype bf16 writes them (models_bf16)."""
    import transformers as T
    bundle = Bundle(os.path.join(OUT, "models_bf16" if bf16 else "models"))
    meta = {}
    for name, (cfg, cls, arch) in tiny_models().items():
        if bf16 and name != "llama":
            continue
        torch.manual_seed(3)
        model = cls(cfg).eval()
        with torch.no_grad():  # norms away from 1 so that a missed offset shows
            for k, p in model.named_parameters():
                if k.endswith("norm.weight"):
                    p.copy_(torch.randn_like(p) * 0.2 + (0.0 if arch == "gemma3" else 1.0))
        path = os.path.join(OUT, f"model_{name}{'_bf16' if bf16 else ''}.gguf")
        stored = write_model_gguf(path, f"ember {name} fixture", cfg, model, arch,
                                  Q.BF16 if bf16 else None)
        # the reference: the same model holding the file's (Q8_0-rounded) weights
        with torch.no_grad():
            sd = model.state_dict()
            for hf, parts in stored.items():
                v = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
                if arch == "llama" and (hf.endswith("q_proj.weight") or hf.endswith("k_proj.weight")):
                    heads = cfg.num_attention_heads if "q_proj" in hf else cfg.num_key_value_heads
                    dim = v.shape[0] // heads // 2  # transformers' _reverse_permute_weights
                    v = v.reshape(heads, dim, 2, *v.shape[1:]).swapaxes(2, 1).reshape(v.shape)
                if arch == "gemma3" and hf.endswith("norm.weight"):
                    v = v - 1
                sd[hf].copy_(v.reshape(sd[hf].shape))
            if cfg.tie_word_embeddings:
                model.tie_weights()
            ids = torch.tensor([MODEL_IDS])
            logits = model(ids).logits[0].float()
            gen = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)[0, len(MODEL_IDS):]
        bundle.add(f"{name}.logits", logits)
        bundle.add(f"{name}.greedy", gen.to(torch.int64))
        # transformers reading the same file must agree (it checks the file's transforms).
        # It cannot read three of them: mixtral files (llama with experts), qwen3moe's
        # expert_feed_forward_length (it keeps the class default, 768) and gemma3's attention
        # scale (it keeps 256; llama.cpp uses the head size): those rest on the model above.
        check = "reference only"
        if name not in ("mixtral", "gemma3", "qwen3moe"):
            tm = T.AutoModelForCausalLM.from_pretrained(OUT, gguf_file=os.path.basename(path),
                                                        dtype=torch.float32).eval()
            with torch.no_grad():
                d = (tm(ids).logits[0].float() - logits).abs().max().item()
            assert d < 1e-4, (name, d)
            check = f"transformers from the GGUF: max |diff| {d:.2e}"
        meta[name] = check
    bundle.meta = {"ids": MODEL_IDS, "checked": meta, "transformers": T.__version__}
    bundle.write()


# ---- the real SmolLM2-135M-Instruct GGUF ---------------------------------------------------------

SMOLLM2_QUESTIONS = ["What is the capital of France?", "Write a haiku about the sea.",
                     "What is 12 + 30?", "Name three primary colors.",
                     "Explain photosynthesis in one sentence."]


def gen_smollm2(path):
    """transformers (which dequantizes the file to f32) on the real SmolLM2 GGUF: for each
    question rendered with the file's chat template, the last token's logits at 4096 fixed
    random ids and at the 64 best ones, and the 24-token greedy continuation. Only these
    expectations are committed, never the model file."""
    import transformers as T
    d, f = os.path.dirname(path), os.path.basename(path)
    tok = T.AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = T.AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    vocab = model.config.vocab_size
    subset = torch.from_numpy(np.random.default_rng(11).choice(vocab, 4096, replace=False))
    bundle = Bundle(os.path.join(OUT, "real_smollm2"))
    for i, q in enumerate(SMOLLM2_QUESTIONS):
        text = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                       add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids
        with torch.no_grad():
            logits = model(ids).logits[0, -1].float()
            gen = model.generate(ids, max_new_tokens=24, do_sample=False)[0, ids.shape[1]:]
        top = torch.topk(logits, 64)
        bundle.add(f"q{i}.ids", ids[0].to(torch.int64))
        bundle.add(f"q{i}.subset_logits", logits[subset])
        bundle.add(f"q{i}.top_ids", top.indices.to(torch.int64))
        bundle.add(f"q{i}.top_logits", top.values)
        bundle.add(f"q{i}.greedy", gen.to(torch.int64))
        print(q, "->", repr(tok.decode(gen, skip_special_tokens=True)))
    bundle.add("subset", subset.to(torch.int64))
    bundle.meta = {"questions": SMOLLM2_QUESTIONS, "transformers": T.__version__,
                   "file": f, "bytes": os.path.getsize(path)}
    bundle.write()


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("parts", nargs="*", default=["types", "tokenizers", "models", "models_bf16"])
    ap.add_argument("--smollm2", help="SmolLM2-135M-Instruct.Q4_1.gguf (scripts/fetch_smollm2.sh)")
    a = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    if "types" in a.parts:
        gen_types()
        gen_meta()
        gen_align1()
        cases = gen_malformed()
        gen_corpus(cases)
    if "tokenizers" in a.parts:
        gen_tokenizers(a.smollm2)
    if "models" in a.parts:
        gen_models()
    if "models_bf16" in a.parts:
        gen_models(bf16=True)
    if a.smollm2:
        gen_smollm2(a.smollm2)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
