/*
 * ember/ember.h — the umbrella header of Ember's public C API.
 *
 *   core.h    status codes, dtypes, the context (errors, scopes, eager mode), devices
 *   tensor.h  tensor handles, host memory, ownership
 *   ops.h     the eager ops
 *   autograd.h  reverse-mode autodiff (tape, em_backward, gradients), cross-entropy
 *   optim.h   AdamW, SGD, clip_grad_norm, learning-rate schedules (torch semantics)
 *   moe.h     the mixture-of-experts block (ragged, loop, dense)
 *   hub.h     Hugging Face Hub ids to local files, through the Hub's cache (and downloads)
 *   safetensors.h  Hugging Face safetensors checkpoints (read, write)
 *   gguf.h    GGUF checkpoints (llama.cpp, Ollama): metadata, tensors, quantized types
 *   config.h  config.json and generation_config.json
 *   model.h   Hugging Face models: loading (device_map, dtype), forward, KV cache, parameters
 *   train.h   causal-LM training: data windows, the trainer, Hub checkpoints out, resume
 *   diffusion.h  diffusers folders: UNet2DModel, model_index.json routing
 *   dit.h     DiT (DiTTransformer2DModel), the transformer of DiTPipeline
 *   sd3.h     SD3Transformer2DModel, the MMDiT of StableDiffusion3Pipeline
 *   flux.h    FluxTransformer2DModel, the transformer of FluxPipeline
 *   t5.h      T5EncoderModel and the T5 tokenizer (SD3's text_encoder_3 / tokenizer_3)
 *   kernels.h  the kernel hub: packages, resolution, lock file (kernel_abi.h: for authors)
 *   generate.h  generation (greedy, sampling, streaming) and sentence embeddings
 *   tokenizer.h  tokenizer.json (BPE, WordPiece, Unigram) id for id with `tokenizers`
 *   chat.h    chat templates (the Jinja2 subset of the Hub's tokenizer_config.json)
 *   torch_rng.h  torch's CPU generator draw for draw (seeds that reproduce diffusers' images)
 *   scheduler.h  diffusers' noise schedulers (DDPM, DDIM, PNDM, Euler, DPM-Solver, FlowMatch)
 *   png.h     images out as PNG
 */
#ifndef EMBER_EMBER_H
#define EMBER_EMBER_H

#include "ember/core.h"
#include "ember/tensor.h"
#include "ember/ops.h"
#include "ember/autograd.h"
#include "ember/optim.h"
#include "ember/compile.h"
#include "ember/moe.h"
#include "ember/hub.h"
#include "ember/kernels.h"
#include "ember/safetensors.h"
#include "ember/gguf.h"
#include "ember/config.h"
#include "ember/model.h"
#include "ember/diffusion.h"
#include "ember/clip.h"
#include "ember/vae.h"
#include "ember/dit.h"
#include "ember/sd3.h"
#include "ember/flux.h"
#include "ember/t5.h"
#include "ember/ddpm.h"
#include "ember/ema.h"
#include "ember/train.h"
#include "ember/generate.h"
#include "ember/tokenizer.h"
#include "ember/chat.h"
#include "ember/pjrt.h"
#include "ember/dist.h"
#include "ember/server.h"
#include "ember/torch_rng.h"
#include "ember/scheduler.h"
#include "ember/png.h"

#endif
