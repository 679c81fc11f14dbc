#!/usr/bin/env python3
"""A tiny StableDiffusion3Pipeline folder with its T5 (text_encoder_3 / tokenizer_3), and
diffusers 0.42's images from it, for tests/test_sd3.c and tests/check_image.py.

tests/fixtures/diffusion/sd3_t5/ is what StableDiffusion3Pipeline.save_pretrained writes for
sd3_tiny's components (scripts/gen_sd3_fixtures.py) plus a T5: text_encoder_3 a random
T5EncoderModel, feed_forward_proj "gated-gelu" as SD3's T5-XXL, d_model 48 (the transformer's
joint_attention_dim), 2 heads of d_kv 8, d_ff 64, 2 layers, 8 buckets up to distance 16;
tokenizer_3 the tiny T5 tokenizer of t5/tok (scripts/gen_t5_fixtures.py). Only model_index.json,
scheduler/, text_encoder_3/ and tokenizer_3/ are files; the other components are symbolic links
to ../sd3_tiny/'s, which hold the same bytes save_pretrained writes.

tests/fixtures/diffusion/sd3_t5_ref.{json,bin} (a Bundle), per run of meta "runs" (prompt,
negative prompt (null: None), guidance, steps, seed, max_sequence_length):
  <run>_image = pipe(..., generator=torch.Generator("cpu").manual_seed(seed), output_type="np")
  .images, f32 [1, 16, 16, 3]
  latents: randn_tensor((1, 16, 8, 8), generator seed 123) and latents_image, run "cfg" from
  them; t5_embeds: pipe._get_t5_prompt_embeds("a photo of a cat", max_sequence_length=8)

Images within 1e-3.
"""
import json
import os
import shutil
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")
SD3 = os.path.join(OUT, "sd3_tiny")
T5 = os.path.join(OUT, "sd3_t5")
LINKED = ("transformer", "vae", "text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2")

# name: (prompt, negative_prompt, guidance_scale, steps, seed, max_seq_len)
RUNS = {
    "cfg": ("a photo of a cat", None, 7.0, 4, 0, 8),
    "negative": ("a red cube on a table", "blurry, low quality", 5.0, 3, 5, 8),
    # truncated to 4 T5 tokens (the eos last)
    "nocfg": ("an astronaut in the snow on a table", None, 1.0, 3, 11, 4),
}


def text_encoder_3(vocab):
    from transformers import T5Config, T5EncoderModel
    torch.manual_seed(870)
    m = T5EncoderModel(T5Config(vocab_size=vocab, d_model=48, d_kv=8, d_ff=64, num_layers=2,
                                num_heads=2, relative_attention_num_buckets=8,
                                relative_attention_max_distance=16,
                                feed_forward_proj="gated-gelu")).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "layer_norm" in n:
                p.normal_(1.0, 0.2)
            elif "relative_attention_bias" in n:
                p.normal_(0.0, 1.0)
            else:
                p.normal_(0.0, 0.3)
    return m


def build():
    from diffusers import StableDiffusion3Pipeline
    from transformers import T5Tokenizer
    tok3 = T5Tokenizer.from_pretrained(os.path.join(OUT, "t5", "tok"))
    pipe = StableDiffusion3Pipeline.from_pretrained(SD3, torch_dtype=torch.float32,
                                                    text_encoder_3=text_encoder_3(len(tok3)),
                                                    tokenizer_3=tok3)
    shutil.rmtree(T5, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        pipe.save_pretrained(tmp)
        os.makedirs(T5)
        for name in ("model_index.json", "scheduler", "text_encoder_3", "tokenizer_3"):
            src = os.path.join(tmp, name)
            (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, os.path.join(T5, name))
    path = os.path.join(T5, "model_index.json")
    with open(path) as f:
        index = json.load(f)
    index.pop("_name_or_path", None)  # the machine's path
    with open(path, "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")
    for name in LINKED:
        os.symlink(os.path.join("..", "sd3_tiny", name), os.path.join(T5, name))


def run(pipe, prompt, neg, guidance, steps, seed, msl, latents=None):
    with torch.no_grad():
        return pipe(prompt, negative_prompt=neg, guidance_scale=guidance,
                    num_inference_steps=steps, max_sequence_length=msl, output_type="np",
                    generator=torch.Generator("cpu").manual_seed(seed),
                    latents=latents).images


def main():
    from diffusers import StableDiffusion3Pipeline
    from diffusers.utils.torch_utils import randn_tensor
    build()
    pipe = StableDiffusion3Pipeline.from_pretrained(T5, torch_dtype=torch.float32)
    assert pipe.text_encoder_3 is not None
    pipe.set_progress_bar_config(disable=True)
    b = Bundle(os.path.join(OUT, "sd3_t5_ref"))
    meta = {}
    for name, (prompt, neg, guidance, steps, seed, msl) in RUNS.items():
        b.add(name + "_image", torch.from_numpy(run(pipe, prompt, neg, guidance, steps, seed,
                                                    msl)))
        meta[name] = {"prompt": prompt, "negative_prompt": neg, "guidance": guidance,
                      "steps": steps, "seed": seed, "max_sequence_length": msl}
    latents = randn_tensor((1, 16, 8, 8), generator=torch.Generator("cpu").manual_seed(123))
    b.add("latents", latents)
    prompt, neg, guidance, steps, seed, msl = RUNS["cfg"]
    b.add("latents_image", torch.from_numpy(run(pipe, prompt, neg, guidance, steps, seed, msl,
                                                 latents=latents.clone())))
    with torch.no_grad():
        b.add("t5_embeds", pipe._get_t5_prompt_embeds("a photo of a cat", max_sequence_length=8))
    b.meta = {"runs": meta}
    print(b.write())


if __name__ == "__main__":
    main()
