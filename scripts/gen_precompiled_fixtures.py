#!/usr/bin/env python3
"""A T5-style tokenizer with a real SentencePiece "Precompiled" normalizer (nmt_nfkc charsmap),
for tests/test_tokenizer.c (its trained-fixture loop checks every expected/<name>.json).

    /opt/refvenv/bin/python scripts/gen_precompiled_fixtures.py

Trains a tiny Unigram model with sentencepiece (normalization_rule_name "nmt_nfkc", the rule of
T5 / SD3's tokenizer_3) on tests/fixtures/tokenizers/corpus.txt plus the text set of
gen_tokenizer_fixtures.py, converts it with transformers' T5Converter (convert_slow_tokenizer,
as T5TokenizerFast does), and writes under tests/fixtures/tokenizers/:

  norm_precompiled.json           the tokenizer.json (compact, ~330 KB, nearly all the charsmap):
                                  Sequence[Precompiled, Strip, Replace], Metaspace, a 700-piece
                                  Unigram, the </s> template
  expected/norm_precompiled.json  what `tokenizers` returns for it on every text of the set
                                  (gen_tokenizer_fixtures.expectations), plus "normalized": the
                                  normalizer's output per text (tok.normalizer.normalize_str)

Needs sentencepiece and protobuf (pinned in scripts/requirements-fixtures.txt).
"""
import io
import json
import os
import sys
import tempfile

import sentencepiece as spm
from tokenizers import Tokenizer
from transformers import T5Tokenizer
from transformers.convert_slow_tokenizer import convert_slow_tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_tokenizer_fixtures as g  # noqa: E402

NAME = "norm_precompiled"


def main():
    lines = list(g.corpus_lines())
    with tempfile.TemporaryDirectory() as d:
        model = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, model_type="unigram",
            vocab_size=700, normalization_rule_name="nmt_nfkc", character_coverage=0.995,
            pad_id=0, eos_id=1, unk_id=2, bos_id=-1, seed_sentencepiece_size=5000,
            num_threads=1, minloglevel=2)
        path = os.path.join(d, "spiece.model")
        with open(path, "wb") as f:
            f.write(model.getvalue())
        slow = T5Tokenizer(vocab_file=path, extra_ids=0, legacy=False)
        fast = convert_slow_tokenizer(slow)
    tok = Tokenizer.from_str(fast.to_str())
    norm = json.loads(tok.to_str())["normalizer"]
    kinds = [n["type"] for n in norm.get("normalizers", [norm])]
    assert "Precompiled" in kinds, kinds
    with open(os.path.join(g.FIX, NAME + ".json"), "w", encoding="utf-8") as f:
        f.write(tok.to_str())  # compact: the charsmap is most of it
    exp = g.expectations(tok, None, 1234)
    exp["normalized"] = [tok.normalizer.normalize_str(t) for _, t in g.TEXTS]
    g.write_json(os.path.join(g.EXP, NAME + ".json"), exp)
    print(NAME, "vocab", tok.get_vocab_size(), "normalizers", kinds,
          os.path.getsize(os.path.join(g.FIX, NAME + ".json")), "bytes")


if __name__ == "__main__":
    main()
