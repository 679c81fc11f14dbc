#!/usr/bin/env python3
"""Randomized differential test of Ember's tokenizer against the `tokenizers` library.

    /opt/refvenv/bin/python scripts/tokenizer_difftest.py [--lib build/libember.so]
                                                         [--seed N] [--count N]

Builds random tokenizer.json files (random normalizers, pre-tokenizers, decoders and added
tokens around the small models of tests/fixtures/tokenizers), loads each in both, and compares
encode (with and without special tokens) and decode (with and without skip_special_tokens) on the
text set and on random strings. Ember is reached through its shared library with ctypes. Prints
each disagreement with the tokenizer and the text, and writes it to /tmp/tokenizer_diff_<n>.json.
A development tool, not a test: the fixtures the tests use come from gen_tokenizer_fixtures.py.

Two library behaviours are left out on purpose: an added token whose normalized form is empty
(the library then matches it at every position), and two normalized added tokens with the same
normalized form (the library keeps one of them at random).
"""
import argparse
import ctypes
import json
import os
import random
import sys
from tokenizers import Tokenizer
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument('--lib', default=os.path.join(ROOT, 'build', 'libember.so'))
ap.add_argument('--seed', type=int, default=0)
ap.add_argument('--count', type=int, default=100)
ARGS = ap.parse_args()
lib = ctypes.CDLL(ARGS.lib)
lib.em_ctx_create.restype = ctypes.c_void_p
lib.em_tokenizer_load_json.restype = ctypes.c_void_p
lib.em_tokenizer_load_json.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p]
lib.em_tokenizer_encode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_bool, ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)), ctypes.POINTER(ctypes.c_size_t)]
lib.em_tokenizer_decode.restype = ctypes.c_void_p
lib.em_tokenizer_decode.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, ctypes.c_bool, ctypes.POINTER(ctypes.c_size_t)]
lib.em_tokenizer_free.argtypes = [ctypes.c_void_p]
lib.em_free.argtypes = [ctypes.c_void_p]
lib.em_ctx_error.restype = ctypes.c_void_p
lib.em_ctx_clear_error.argtypes = [ctypes.c_void_p]
lib.em_ctx_error.argtypes = [ctypes.c_void_p]
ctx = lib.em_ctx_create()
def err():
    e = lib.em_ctx_error(ctx)
    if not e: return None
    # em_error: status (int), op[48], device[48], detail[768], message[1280]
    msg = ctypes.string_at(e + 4 + 48 + 48 + 768, 1280).split(b'\0')[0].decode(errors='replace')
    lib.em_ctx_clear_error(ctx); return msg
def ember_load(doc):
    b = doc.encode()
    t = lib.em_tokenizer_load_json(ctx, b, len(b), b"diff")
    return t, (err() if not t else None)
def ember_encode(t, text, sp):
    b = text.encode(); ids = ctypes.POINTER(ctypes.c_int32)(); n = ctypes.c_size_t()
    rc = lib.em_tokenizer_encode(ctx, t, b, len(b), sp, ctypes.byref(ids), ctypes.byref(n))
    if rc: return 'ERR ' + (err() or '')
    r = [ids[i] for i in range(n.value)]; lib.em_free(ids); return r
def ember_decode(t, ids, skip):
    arr = (ctypes.c_int32 * max(1, len(ids)))(*ids); n = ctypes.c_size_t()
    p = lib.em_tokenizer_decode(ctx, t, arr, len(ids), skip, ctypes.byref(n))
    if not p: return 'ERR ' + (err() or '')
    s = ctypes.string_at(p, n.value).decode('utf-8'); lib.em_free(p); return s

FIX = os.path.join(ROOT, 'tests', 'fixtures', 'tokenizers') + '/'
texts = [t['text'] for t in json.load(open(FIX + 'texts.json'))]
bases = {k: json.load(open(FIX + 'base_%s.json' % k)) for k in ['small_bpe', 'small_bytelevel']}
R = random.Random(ARGS.seed)
def rtext():
    pool = "aAbBcé e\u0301 ß İ ſ 12 ３ ½ ,.!?;:'\"()[]-_ \t\n\r  \u00a0\u3000 你好 👍🏽 👨‍👩‍👧 ▁ Ġ <s> </s> [MASK] cat concatenate Hello World x\x00\x01\u200b\ufeff\u0301\u0378"
    toks = pool.split(' ') + list(pool)
    return ''.join(R.choice(toks) + R.choice(['', ' ', '  ', '']) for _ in range(R.randrange(0, 30)))
RX = [r"\s+", r"\p{L}+", r"\p{N}", r"[aeiou]", r"\s*", r"(?=[A-Z])", r"x*", r"'s|'t", r" ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+", r"(?i:'s|'t|'re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}", r"\w+", r"[^\w\s]", r"$", r"^a", r"\b"]
BEH = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]
def rnorm():
    c = R.randrange(12)
    if c == 0: return {"type": "NFC"}
    if c == 1: return {"type": "NFD"}
    if c == 2: return {"type": "NFKC"}
    if c == 3: return {"type": "NFKD"}
    if c == 4: return {"type": "Lowercase"}
    if c == 5: return {"type": "StripAccents"}
    if c == 6: return {"type": "Strip", "strip_left": R.random() < .5, "strip_right": R.random() < .5}
    if c == 7: return {"type": "Replace", "pattern": R.choice([{"String": " "}, {"String": "a"}, {"Regex": R.choice(RX)}]), "content": R.choice(["", "▁", "_", "xy"])}
    if c == 8: return {"type": "Prepend", "prepend": R.choice(["▁", "x", "  "])}
    if c == 9: return {"type": "BertNormalizer", "clean_text": R.random() < .5, "handle_chinese_chars": R.random() < .5, "strip_accents": R.choice([None, True, False]), "lowercase": R.random() < .5}
    if c == 10: return {"type": "Nmt"}
    return {"type": "Sequence", "normalizers": [rnorm() for _ in range(R.randrange(0, 3))]}
def rpre(depth=0):
    c = R.randrange(12)
    if c == 0: return {"type": "Split", "pattern": R.choice([{"String": R.choice([" ", "a", "▁"])}, {"Regex": R.choice(RX)}]), "behavior": R.choice(BEH), "invert": R.random() < .3}
    if c == 1: return {"type": "ByteLevel", "add_prefix_space": R.random() < .5, "trim_offsets": False, "use_regex": R.random() < .5}
    if c == 2: return {"type": "Metaspace", "replacement": R.choice(["▁", "_"]), "prepend_scheme": R.choice(["first", "always", "never"]), "split": R.random() < .5}
    if c == 3: return {"type": "Whitespace"}
    if c == 4: return {"type": "WhitespaceSplit"}
    if c == 5: return {"type": "BertPreTokenizer"}
    if c == 6: return {"type": "Digits", "individual_digits": R.random() < .5}
    if c == 7: return {"type": "Punctuation", "behavior": R.choice(BEH)}
    if c == 8: return {"type": "CharDelimiterSplit", "delimiter": R.choice([" ", "a", "-"])}
    if c == 9: return {"type": "FixedLength", "length": R.randrange(1, 6)}
    if depth < 2: return {"type": "Sequence", "pretokenizers": [rpre(depth + 1) for _ in range(R.randrange(1, 4))]}
    return {"type": "Whitespace"}
def rdec():
    c = R.randrange(9)
    if c == 0: return {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    if c == 1: return {"type": "Metaspace", "replacement": "▁", "prepend_scheme": R.choice(["first", "always", "never"]), "split": True}
    if c == 2: return {"type": "WordPiece", "prefix": "##", "cleanup": R.random() < .5}
    if c == 3: return {"type": "ByteFallback"}
    if c == 4: return {"type": "Fuse"}
    if c == 5: return {"type": "Strip", "content": R.choice([" ", "a", "▁"]), "start": R.randrange(0, 2), "stop": 0}
    if c == 6: return {"type": "Replace", "pattern": R.choice([{"String": "▁"}, {"Regex": r"\s+"}]), "content": " "}
    if c == 7: return {"type": "BPEDecoder", "suffix": "</w>"}
    return {"type": "Sequence", "decoders": [rdec() for _ in range(R.randrange(1, 4))]}
def radded(vocab_n):
    out = []
    for i, content in enumerate(R.sample(["<s>", "</s>", "[MASK]", "cat", "Hello World", "hello", "<|im", "<|im_start|>", "▁▁", "\n\n", "a b", "é", "e\u0301", "ab"], R.randrange(0, 6))):
        sp = R.random() < .5
        out.append({"id": vocab_n + i, "content": content, "single_word": R.random() < .3, "lstrip": R.random() < .3, "rstrip": R.random() < .3, "normalized": R.random() < .5, "special": sp})
    return out
fails = 0
N = ARGS.count
for it in range(N):
    base = R.choice(list(bases))
    model = bases[base]
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": radded(len(model["vocab"]) + 10),
           "normalizer": rnorm() if R.random() < .7 else None, "pre_tokenizer": rpre() if R.random() < .8 else None,
           "post_processor": None, "decoder": rdec() if R.random() < .8 else None, "model": model}
    s = json.dumps(doc, ensure_ascii=False)
    try:
        ref = Tokenizer.from_str(s)
    except Exception as e:
        t, e2 = ember_load(s)
        if t: lib.em_tokenizer_free(t)
        continue
    if ref.normalizer and any(a["normalized"] and ref.normalizer.normalize_str(a["content"]) == ""
                              for a in doc["added_tokens"]):
        continue  # an added token that normalizes to nothing: the library matches it everywhere
    if ref.normalizer:
        pats = [ref.normalizer.normalize_str(a["content"]) for a in doc["added_tokens"] if a["normalized"]]
        if len(set(pats)) != len(pats):
            continue  # two normalized tokens with one pattern: the library picks one at random
    t, e2 = ember_load(s)
    if not t:
        print("LOAD MISMATCH: library loads, ember:", e2); fails += 1; continue
    hist = []
    for k in range(20):
        text = R.choice(texts) if R.random() < .3 else rtext()
        hist.append(text)
        for sp in (False, True):
            try:
                want = ref.encode(text, add_special_tokens=sp).ids
            except BaseException as e:
                want = 'EXC'
            got = ember_encode(t, text, sp)
            if want != 'EXC' and got != want:
                json.dump({"doc": doc, "texts": hist + [text]}, open('/tmp/tokenizer_diff_%d.json' % it, 'w'), ensure_ascii=False)
                fails += 1
                print("ENCODE MISMATCH it=%d text=%r sp=%s\n lib=%s\n our=%s" % (it, text, sp, want, got))
                print(" doc:", json.dumps({k2: v for k2, v in doc.items() if k2 != 'model'}, ensure_ascii=False)[:1500])
                break
            if want != 'EXC':
                for skip in (False, True):
                    try:
                        dw = ref.decode(want, skip_special_tokens=skip)
                    except BaseException:
                        continue
                    dg = ember_decode(t, want, skip)
                    if dw != dg:
                        fails += 1
                        print("DECODE MISMATCH it=%d ids=%s skip=%s\n lib=%r\n our=%r" % (it, want, skip, dw, dg))
                        print(" decoder:", json.dumps(doc['decoder'], ensure_ascii=False), "added:", json.dumps(doc['added_tokens'], ensure_ascii=False)[:600])
                        break
        if fails > 5: break
    lib.em_tokenizer_free(t)
    if fails > 5: break
print("done, fails:", fails)
