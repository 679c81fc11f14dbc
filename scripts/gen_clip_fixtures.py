#!/usr/bin/env python3
"""CLIP text-encoder fixtures (tests/fixtures/diffusion/clip/) from transformers 5.24 and
tokenizers 0.23, for tests/test_clip_text.c.

1. A small CLIP-style byte-level BPE vocabulary, trained with the `tokenizers` library through
   CLIP's own normalizer and pre-tokenizer on the text below, then laid out as openai's
   vocab.json is: the 256 byte characters, the same with "</w>", the merges in order, then
   <|startoftext|> and <|endoftext|> (the trainer breaks ties between equally frequent pairs
   in no fixed order, so a rerun may make another vocabulary; the references are remade with
   it). Written as Stable Diffusion's `tokenizer/` folders hold
   it: vocab.json + merges.txt + tokenizer_config.json + special_tokens_map.json
   (`tok_slow`, SD 1.x's pad token <|endoftext|>; `tok_sd2`, SD 2.x's pad token "!"), and as
   transformers saves it (`tok_fast`: save_pretrained, with a tokenizer.json).
   In transformers 5 CLIPTokenizerFast is CLIPTokenizer (the `tokenizers`-backed class), so one
   set of ids is recorded per folder: what the pipeline calls,
   tokenizer(prompt, padding="max_length", max_length=tokenizer.model_max_length,
   truncation=True), for prompts with case, punctuation, numbers, unicode, an empty one and one
   longer than 77 tokens (clip_tokenizer_ref.json).
2. Tiny random CLIPTextModel (quick_gelu, 3 layers, the eos_token_id rule) and
   CLIPTextModelWithProjection (gelu, 2 layers, the legacy eos_token_id == 2 argmax rule), saved
   with save_pretrained, and their outputs for a padded batch of 3 prompts, with and without the
   attention mask, and an unpadded batch of 2 (clip_text_ref / clip_text_proj_ref bundles):
   last_hidden_state, pooler_output, hidden_states[-2], and what diffusers'
   StableDiffusionPipeline.encode_prompt makes with clip_skip=1
   (final_layer_norm(hidden_states[-(clip_skip + 1)])), text_embeds for the projection model.

Run with the pinned reference libraries: /opt/refvenv/bin/python scripts/gen_clip_fixtures.py
"""
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion", "clip")

CORPUS = """
a photo of an astronaut riding a horse on mars. a painting of a cat sitting on a chair,
highly detailed, digital art, trending on artstation. portrait of a woman with red hair,
oil on canvas, by a famous painter. a beautiful landscape with mountains and a lake at sunset.
the quick brown fox jumps over the lazy dog. it's a small house in the woods; don't go there.
we'll see what they're doing. 1 2 3 4 5 6 7 8 9 0 photograph, cinematic lighting, 4k, 8k.
an illustration of a dragon flying over a castle, fantasy, concept art, sharp focus.
a cute corgi dog wearing sunglasses on the beach. a bowl of fruit: apples, oranges, bananas!
café, naïve, résumé, über, straße. the city at night with neon lights and rain.
"""

PROMPTS = [
    "a photo of an astronaut riding a horse on mars",
    "A PHOTO, of Café -- naïve résumé!!",
    "  multiple   spaces\tand\nnewlines  ",
    "numbers 12345 and 3.14, 8k 4K",
    "emoji \U0001F431 and \u65e5\u672c\u8a9e, e\u0301t\u00e9",
    "it's don't we'll they're I'M YOU'D",
    "",
    "<|startoftext|>hello<|endoftext|> world",
    "mixed-case HeLLo, WoRLD?! ~~ (brackets) [x] {y} #tag @user",
    " ".join(["a beautiful landscape with mountains and a lake at sunset"] * 12),
]


def bytes_to_unicode():
    """openai/CLIP's (and GPT-2's) byte -> printable character table."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def train_merges():
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers, trainers
    from tokenizers.models import BPE
    tok = Tokenizer(BPE(continuing_subword_prefix="", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence(
        [normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Lowercase()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""),
                             behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    trainer = trainers.BpeTrainer(vocab_size=900, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  end_of_word_suffix="</w>")
    tok.train_from_iterator([CORPUS] * 4, trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in merges]


def write_tokenizers():
    chars = list(bytes_to_unicode().values())
    vocab = chars + [c + "</w>" for c in chars]
    seen = set(vocab)
    merges = []
    for a, b in train_merges():
        if a not in seen or b not in seen:
            continue  # a merge of a piece the CLIP layout does not have
        merges.append((a, b))
        if a + b not in seen:
            vocab.append(a + b)
            seen.add(a + b)
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    ids = {t: i for i, t in enumerate(vocab)}
    for name, pad in (("tok_slow", "<|endoftext|>"), ("tok_sd2", "!")):
        d = os.path.join(OUT, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(ids, f, ensure_ascii=False)
        with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n")
            for a, b in merges:
                f.write(f"{a} {b}\n")
        special = {"bos_token": {"content": "<|startoftext|>", "lstrip": False, "normalized": True,
                                 "rstrip": False, "single_word": False},
                   "eos_token": {"content": "<|endoftext|>", "lstrip": False, "normalized": True,
                                 "rstrip": False, "single_word": False},
                   "pad_token": pad, "unk_token": "<|endoftext|>"}
        with open(os.path.join(d, "special_tokens_map.json"), "w") as f:
            json.dump(special, f, indent=2)
        # as Stable Diffusion 1.5's / 2.1's tokenizer_config.json (no added_tokens_decoder)
        cfg = {"add_prefix_space": False, "do_lower_case": True, "errors": "replace",
               "model_max_length": 77, "tokenizer_class": "CLIPTokenizer", **special}
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
    return len(vocab)


def record_tokenizers():
    from transformers import CLIPTokenizer, CLIPTokenizerFast
    assert CLIPTokenizerFast is CLIPTokenizer  # transformers 5: one tokenizers-backed class
    slow = CLIPTokenizer.from_pretrained(os.path.join(OUT, "tok_slow"))
    fast_dir = os.path.join(OUT, "tok_fast")
    shutil.rmtree(fast_dir, ignore_errors=True)
    slow.save_pretrained(fast_dir)
    for extra in ("vocab.json", "merges.txt"):  # the folder holds tokenizer.json alone
        p = os.path.join(fast_dir, extra)
        if os.path.exists(p):
            os.remove(p)
    ref = {"prompts": PROMPTS, "folders": {}}
    for name in ("tok_slow", "tok_fast", "tok_sd2"):
        tok = CLIPTokenizer.from_pretrained(os.path.join(OUT, name))
        enc = tok(PROMPTS, padding="max_length", max_length=tok.model_max_length, truncation=True)
        plain = [tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
        ref["folders"][name] = {
            "model_max_length": tok.model_max_length, "bos": tok.bos_token_id,
            "eos": tok.eos_token_id, "pad": tok.pad_token_id,
            "input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
            "plain_ids": plain}
    with open(os.path.join(OUT, "clip_tokenizer_ref.json"), "w") as f:
        json.dump(ref, f, ensure_ascii=False)
        f.write("\n")
    return slow


def randomise(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif "embedding" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))


def write_model(name, cls, cfg, tok, seed):
    model = cls(cfg).eval()
    randomise(model, seed)
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d)
    b = Bundle(os.path.join(OUT, name + "_ref"))
    enc = tok(PROMPTS[:3], padding="max_length", max_length=77, truncation=True,
              return_tensors="pt")
    short = tok([PROMPTS[0], PROMPTS[3]], padding=True, return_tensors="pt")
    text = model.text_model if hasattr(model, "text_model") else model
    with torch.no_grad():
        for tag, ids, mask in (("", enc["input_ids"], None), ("masked_", enc["input_ids"],
                               enc["attention_mask"]), ("short_", short["input_ids"],
                               short["attention_mask"])):
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
            b.add(tag + "ids", ids.to(torch.int64))
            if mask is not None:
                b.add(tag + "mask", mask.to(torch.int64))
            b.add(tag + "last_hidden_state", out.last_hidden_state)
            pooled = out.text_embeds if hasattr(out, "text_embeds") else out.pooler_output
            if hasattr(out, "text_embeds"):
                b.add(tag + "text_embeds", out.text_embeds)
                # the pooled row itself, before text_projection
                pooled = text(input_ids=ids, attention_mask=mask).pooler_output
            b.add(tag + "pooler_output", pooled)
            b.add(tag + "hidden_m2", out.hidden_states[-2])
            if tag == "short_":  # the embeddings, once (the fixture stays small)
                b.add(tag + "hidden_0", out.hidden_states[0])
            # diffusers' encode_prompt with clip_skip=1
            b.add(tag + "clip_skip1", text.final_layer_norm(out.hidden_states[-2]))
    b.meta["layers"] = cfg.num_hidden_layers
    b.write()


def main():
    import transformers
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection
    assert transformers.__version__ == "5.24.0", transformers.__version__
    torch.manual_seed(0)
    os.makedirs(OUT, exist_ok=True)
    n_vocab = write_tokenizers()
    tok = record_tokenizers()
    eos = tok.eos_token_id
    cfg = CLIPTextConfig(vocab_size=n_vocab, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=77,
                         hidden_act="quick_gelu", projection_dim=16, bos_token_id=tok.bos_token_id,
                         eos_token_id=eos, pad_token_id=1)
    write_model("clip_text", CLIPTextModel, cfg, tok, 1)
    cfg2 = CLIPTextConfig(vocab_size=n_vocab, hidden_size=32, intermediate_size=48,
                          num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=77,
                          hidden_act="gelu", projection_dim=16, layer_norm_eps=1e-6,
                          bos_token_id=0, eos_token_id=2, pad_token_id=1)
    write_model("clip_text_proj", CLIPTextModelWithProjection, cfg2, tok, 2)
    print("vocab", n_vocab, "written to", OUT)


if __name__ == "__main__":
    main()
