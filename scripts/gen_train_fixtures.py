#!/usr/bin/env python3
"""Records transformers' causal-LM loss and every parameter's gradient on the tiny checkpoints
that scripts/gen_model_fixtures.py wrote (tests/fixtures/models/<family>/), in float32.

Usage: python scripts/gen_train_fixtures.py [family ...]
Needs the pinned versions of scripts/requirements-fixtures.txt.

Writes tests/fixtures/train/<family>_grads.{json,bin} (a Bundle): ids [2, 10], labels (ids with
some positions set to -100), the loss of model(input_ids=ids, labels=labels) (transformers shifts
the labels: position t predicts t+1, mean over the predictions not ignored), the logits, and
"grad/<Hub name>" for every parameter; and <family>_aux_grads for the MoE families with
output_router_logits (the LM loss plus router_aux_loss_coef times transformers'
load_balancing_loss_func; "aux_loss" alone too). Arguments "aux:<family>" select those.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

MODELS = os.path.join(HERE, "..", "tests", "fixtures", "models")
OUT = os.path.join(HERE, "..", "tests", "fixtures", "train")


def load(family):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(os.path.join(MODELS, family),
                                                dtype=torch.float32).eval()


def record(family):
    model = load(family)
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(3, model.config.get_text_config().vocab_size, (2, 10), generator=g)
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


AUX_COEF = 0.25  # large, so that the router's share of every gradient is well above 1e-5


def record_aux(family):
    """The same with output_router_logits: loss = LM loss + AUX_COEF * load-balancing loss."""
    model = load(family)
    model.config.output_router_logits = True
    model.router_aux_loss_coef = AUX_COEF
    g = torch.Generator().manual_seed(11)
    ids = torch.randint(3, model.config.vocab_size, (2, 12), generator=g)
    labels = ids.clone()
    labels[1, 3] = -100
    out = model(input_ids=ids, labels=labels)
    out.loss.backward()
    b = Bundle(os.path.join(OUT, family + "_aux_grads"))
    b.add("ids", ids)
    b.add("labels", labels)
    b.add("loss", out.loss.detach().reshape(1).to(torch.float64))
    b.add("aux_loss", out.aux_loss.detach().reshape(1).to(torch.float64))
    for name, p in model.named_parameters():
        b.add("grad/" + name, p.grad)
    # what `ember train --seq-len 16 --batch 2 --no-shuffle` computes at step 0: windows 0 and 1
    # of tests/fixtures/train/ids.npy, each its own labels; with the aux term and without it
    import numpy as np
    w = torch.from_numpy(np.load(os.path.join(OUT, "ids.npy"))[:32].astype(np.int64)).reshape(2, 16)
    with torch.no_grad():
        b.add("window_loss", model(input_ids=w, labels=w).loss.reshape(1).to(torch.float64))
        model.config.output_router_logits = False
        b.add("window_loss_lm", model(input_ids=w, labels=w).loss.reshape(1).to(torch.float64))
    b.meta = {"family": family, "params": len(list(model.parameters())),
              "router_aux_loss_coef": AUX_COEF}
    n, size = b.write()
    print(f"{family} (router aux loss): {n} tensors, {size} bytes")


def main():
    # gemma4: the tiny MoE checkpoint (router, experts beside the dense MLP)
    fams = sys.argv[1:] or ["qwen3", "llama", "qwen3_moe", "gemma4_text", "gemma4",
                            "aux:qwen3_moe", "aux:mixtral"]
    for fam in fams:
        if fam.startswith("aux:"):
            record_aux(fam[4:])
        else:
            record(fam)


if __name__ == "__main__":
    main()
