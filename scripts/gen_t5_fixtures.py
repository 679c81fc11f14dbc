#!/usr/bin/env python3
"""Tiny random T5EncoderModels and a tiny T5 tokenizer (transformers 5.24), with
transformers' outputs from them, for tests/test_t5.c.

tests/fixtures/diffusion/t5/:
  tok/      T5Tokenizer (tokenizers' Unigram) of a made-up 60-piece vocabulary, saved with
            save_pretrained: pad 0, </s> 1, <unk> 2, no precompiled charsmap (a real T5's
            "Precompiled" normalizer: scripts/gen_precompiled_fixtures.py), WhitespaceSplit +
            Metaspace, the TemplateProcessing that appends </s>; model_max_length 16
  gated/    T5EncoderModel, feed_forward_proj "gated-gelu" (T5 v1.1, SD3's T5-XXL): d_model 16,
            2 heads of d_kv 6 (inner 12 != d_model), d_ff 24, 3 layers, 8 buckets up to
            distance 12 (sequences of 20 reach the logarithmic buckets)
  relu/     the same with "relu" (the original T5), 2 layers, 3 heads of 4, 6 buckets, max
            distance 10

t5_ref.{json,bin} (a Bundle):
  ids [2, 20] i64 (random ids < vocab); gated_out, relu_out = model(ids).last_hidden_state;
  mask [2, 20] i64 (row 0 all ones, row 1 the first 11); gated_masked_out =
  model(ids, attention_mask=mask).last_hidden_state
  meta "prompts": texts; per prompt, meta "tok_ids" = tok(prompts, padding="max_length",
  max_length=16, truncation=True, add_special_tokens=True).input_ids (as diffusers'
  _get_t5_prompt_embeds calls it); "tok_ids_8" the same with max_length 8; "tok_plain" =
  tok(prompt, add_special_tokens=False).input_ids

Within 1e-4 (f32); the ids exactly.
"""
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion", "t5")

PIECES = ["▁", "▁a", "▁the", "▁photo", "▁of", "▁cat", "▁dog", "▁red", "▁cube", "▁on", "▁table",
          "▁in", "▁snow", "▁astronaut", "▁blurry", "▁low", "▁quality", "s", "ing", "ed", "er",
          ",", ".", "!", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n",
          "o", "p", "q", "r", "t", "u", "v", "w", "x", "y", "z", "▁ph", "oto", "▁c", "at",
          "▁sn", "ow", "▁re", "d", "'"]

PROMPTS = ["a photo of a cat", "a red cube on a table", "an astronaut in the snow",
           "blurry, low quality", "", "  spaced   out  words ", "Hello World!",
           "a dog dog dog dog dog dog dog dog dog dog dog dog dog dog dog dog dog",
           "unknown Ünïcödé ☃ pieces", "the cat's photos."]


def tokenizer():
    from transformers import T5Tokenizer
    seen, vocab = set(), [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    for i, p in enumerate(PIECES):
        if p not in seen:
            seen.add(p)
            vocab.append((p, -1.0 - 0.37 * i - (0.5 if len(p) == 1 else 0.0)))
    tok = T5Tokenizer(vocab=vocab, extra_ids=0, model_max_length=16)
    path = os.path.join(OUT, "tok")
    shutil.rmtree(path, ignore_errors=True)
    tok.save_pretrained(path)
    return T5Tokenizer.from_pretrained(path)


def model(name, seed, vocab, **cfg):
    from transformers import T5Config, T5EncoderModel
    torch.manual_seed(seed)
    m = T5EncoderModel(T5Config(vocab_size=vocab, d_model=16, **cfg)).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "layer_norm" in n:
                p.normal_(1.0, 0.2)
            elif "relative_attention_bias" in n:
                p.normal_(0.0, 1.0)
            else:
                p.normal_(0.0, 0.3)
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    m.save_pretrained(path)
    return T5EncoderModel.from_pretrained(path).eval()


def main():
    os.makedirs(OUT, exist_ok=True)
    tok = tokenizer()
    v = len(tok)
    gated = model("gated", 900, v, d_kv=6, d_ff=24, num_layers=3, num_heads=2,
                  relative_attention_num_buckets=8, relative_attention_max_distance=12,
                  feed_forward_proj="gated-gelu")
    relu = model("relu", 910, v, d_kv=4, d_ff=20, num_layers=2, num_heads=3,
                 relative_attention_num_buckets=6, relative_attention_max_distance=10,
                 feed_forward_proj="relu")
    b = Bundle(os.path.join(OUT, "..", "t5_ref"))
    g = torch.Generator().manual_seed(920)
    ids = torch.randint(0, v, (2, 20), generator=g)
    mask = torch.ones(2, 20, dtype=torch.long)
    mask[1, 11:] = 0
    b.add("ids", ids)
    b.add("mask", mask)
    with torch.no_grad():
        b.add("gated_out", gated(ids).last_hidden_state)
        b.add("relu_out", relu(ids).last_hidden_state)
        b.add("gated_masked_out", gated(ids, attention_mask=mask).last_hidden_state)
    b.meta = {
        "prompts": PROMPTS,
        "tok_ids": tok(PROMPTS, padding="max_length", max_length=16, truncation=True,
                       add_special_tokens=True).input_ids,
        "tok_ids_8": tok(PROMPTS, padding="max_length", max_length=8, truncation=True,
                         add_special_tokens=True).input_ids,
        "tok_plain": [tok(p, add_special_tokens=False).input_ids for p in PROMPTS],
    }
    print(b.write())


if __name__ == "__main__":
    main()
