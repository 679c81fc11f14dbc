#!/usr/bin/env python3
"""Records transformers' causal-LM loss and every parameter's gradient on the tiny checkpoints
that scripts/gen_model_fixtures.py wrote (tests/fixtures/models/<family>/), in float32.

Usage: python scripts/gen_train_fixtures.py [family ...]
Needs the pinned versions of scripts/requirements-fixtures.txt.

Writes tests/fixtures/train/<family>_grads.{json,bin} (a Bundle): ids [2, 10], labels (ids with
some positions set to -100), the loss of model(input_ids=ids, labels=labels) (transformers shifts
the labels: position t predicts t+1, mean over the predictions not ignored), the logits, and
"grad/<Hub name>" for every parameter.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

MODELS = os.path.join(HERE, "..", "tests", "fixtures", "models")
OUT = os.path.join(HERE, "..", "tests", "fixtures", "train")


def record(family):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, family),
                                                 dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, model.config.vocab_size, (2, 10), generator=g)
    labels = ids.clone()
    labels[0, 4] = -100
    labels[1, 7:] = -100
    out = model(input_ids=ids, labels=labels)
    out.loss.backward()
    b = Bundle(os.path.join(OUT, family + "_grads"))
    b.add("ids", ids)
    b.add("labels", labels)
    b.add("loss", out.loss.detach().reshape(1).to(torch.float64))
    b.add("logits", out.logits.detach())
    for name, p in model.named_parameters():
        b.add("grad/" + name, p.grad)
    b.meta = {"family": family, "params": len(list(model.parameters()))}
    n, size = b.write()
    print(f"{family}: {n} tensors, {size} bytes")


def main():
    for fam in sys.argv[1:] or ["qwen3", "llama", "qwen3_moe"]:
        record(fam)


if __name__ == "__main__":
    main()
