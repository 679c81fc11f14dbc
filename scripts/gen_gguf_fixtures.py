#!/usr/bin/env python3
"""Generates the GGUF fixtures in tests/fixtures/gguf/ with the real `gguf` package (pinned in
scripts/requirements-fixtures.txt), and the seed corpus of fuzz/fuzz_gguf.c.

Usage: /opt/refvenv/bin/python scripts/gen_gguf_fixtures.py

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
    for name in ("overlap", "dup_key", "nested_too_deep", "row_not_blocks", "trunc_data"):
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


def main():
    os.makedirs(OUT, exist_ok=True)
    gen_types()
    gen_meta()
    gen_align1()
    cases = gen_malformed()
    gen_corpus(cases)
    print("wrote", OUT, "and", CORPUS)


if __name__ == "__main__":
    main()
