#!/usr/bin/env bash
# Trains a small Qwen3-style model from random weights on a book-length text with `ember train`
# on the CPU, printing the validation loss as it falls, then generates a passage with
# `ember generate` from the checkpoint it wrote.
#
# Usage: scripts/train-demo.sh [WORK_DIR]      (default: build/train-demo)
#   EMBER=path/to/ember (default: build/tools/ember/ember), STEPS=N (default 500),
#   EMBER_NUM_THREADS=N (the CPU threads; the default is every core).
#
# The text: ../shared/data/text/tinyshakespeare.txt where present (1.1 MB of Shakespeare's plays);
# otherwise the fortune-cookie database of Debian's `fortunes` package
# (/usr/share/games/fortunes, `sudo apt-get install fortunes`): quotations, literature, songs
# and poems, about 2 MB. Neither is committed.
# The model: `ember make-checkpoint --preset tiny-qwen3`: Qwen3 layout, 4 layers, hidden 192,
# 4 heads (2 KV heads) of 48, MLP 576, tied embeddings, vocabulary 257 (about 1.8 M parameters),
# with a byte-level tokenizer this script writes (one token per byte, plus <|endoftext|>).
set -euo pipefail
cd "$(dirname "$0")/.."
EMBER=${EMBER:-build/tools/ember/ember}
WORK=${1:-build/train-demo}
STEPS=${STEPS:-500}
[ -x "$EMBER" ] || { echo "train-demo: no $EMBER: build first (see README)" >&2; exit 2; }
mkdir -p "$WORK"

text=../shared/data/text/tinyshakespeare.txt
if [ ! -f "$text" ]; then
  if [ -d /usr/share/games/fortunes ]; then
    text=$WORK/fortunes.txt
    # the cookies without their % separators, in a fixed order
    find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort |
      xargs cat | grep -v '^%$' > "$text"
  else
    echo "train-demo: no ../shared/data/text/tinyshakespeare.txt and no fortunes database:" >&2
    echo "            sudo apt-get install fortunes   (Debian's fortune cookies)" >&2
    exit 2
  fi
fi
echo "train-demo: text $text ($(wc -c < "$text") bytes)"

# A byte-level BPE tokenizer without merges: GPT-2's byte-to-unicode alphabet, id = byte value.
python3 - "$WORK/tokenizer.json" <<'EOF'
import json, sys
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
     list(range(ord("®"), ord("ÿ") + 1))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
vocab["<|endoftext|>"] = 256
tok = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                      "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                "use_regex": False},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
              "ignore_merges": False, "vocab": vocab, "merges": []},
}
json.dump(tok, open(sys.argv[1], "w"), ensure_ascii=False)
EOF
cat > "$WORK/tokenizer_config.json" <<'EOF'
{"eos_token": "<|endoftext|>", "tokenizer_class": "PreTrainedTokenizerFast"}
EOF

"$EMBER" make-checkpoint --preset tiny-qwen3 --dtype f32 --seed 1 \
  --tokenizer "$WORK/tokenizer.json" --out "$WORK/init"
cp "$WORK/tokenizer_config.json" "$WORK/init/"
start=$(date +%s)
"$EMBER" train --model "$WORK/init" --data "$text" --seq-len 128 --batch 8 --steps "$STEPS" \
  --lr 3e-3 --schedule cosine --warmup 30 --weight-decay 0.1 --beta2 0.99 --grad-clip 1.0 \
  --val-fraction 0.01 --eval-every 50 --seed 1 --out "$WORK/model"
echo "train-demo: trained in $(( $(date +%s) - start )) s; checkpoint $WORK/model"
"$EMBER" generate --model "$WORK/model" --prompt "$(head -c 200 "$text")" --max-new-tokens 400 \
  --temperature 0.8 --top-k 40 --seed 7
