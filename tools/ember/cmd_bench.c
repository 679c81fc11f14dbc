/* `ember bench <what>`: dispatches to the benchmark families. */
#include <stdio.h>
#include <string.h>

#include "bench_util.h"
#include "cli.h"

int bench_ops(int argc, char **argv);
int bench_decode(int argc, char **argv);
int bench_moe(int argc, char **argv);
int bench_attention(int argc, char **argv);
int bench_tokenize(int argc, char **argv);
int bench_pool(int argc, char **argv);
int bench_python(int argc, char **argv);
int bench_serve(int argc, char **argv);
int bench_train(int argc, char **argv);
int bench_diffusion(int argc, char **argv);

int cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        printf("usage: ember bench <what> [options]\n\n"
               "  ops       machine limits, peers and Ember's op kernels (dispatch, bandwidth,\n"
               "            matmul, decode-shaped matmul)\n"
               "  decode    decode and prefill tokens/s of Qwen3-0.6B / Qwen3-30B-A3B shapes\n"
               "  moe       one MoE layer of Qwen3-30B-A3B / Gemma 4 26B-A4B: loop, dense, ragged\n"
               "  attention the CPU attention (decode, prefill); --kernels: a package against it\n"
               "  tokenize  tokenizer load time and encode MB/s against the tokenizers library\n"
               "  pool      thread-pool job latency and decode with busy neighbours, against OpenMP\n"
               "  python    the Python package's overhead per decoded token and per op, against\n"
               "            the C API and transformers' generate\n"
               "  serve     continuous batching of `ember serve`: tokens/s, time to first token and\n"
               "            inter-token latency, against static batching\n"
               "  train     one training step: tokens/s, MFU and memory per token, against torch\n"
               "  diffusion one denoising step of SD 1.5's UNet: s/step and FLOP-peak fraction,\n"
               "            against diffusers; the 3x3 conv against torch\n\n"
               "Each benchmark measures the machine's limit, the peer and Ember in the same run\n"
               "and prints ratios. --json prints one JSON object per line.\n");
        return argc < 2 ? 2 : 0;
    }
    bool json = false, help = false;
    for (int i = 2; i < argc; i++) {
        json |= !strcmp(argv[i], "--json");
        help |= !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help");
    }
    /* every benchmark's first line: what it runs on, the kernel level first */
    if (!help) {
        bench_print_machine(json);
        bench_match_peers_to_level(json);
    }
    if (!strcmp(argv[1], "ops")) return bench_ops(argc - 1, argv + 1);
    if (!strcmp(argv[1], "decode")) return bench_decode(argc - 1, argv + 1);
    if (!strcmp(argv[1], "moe")) return bench_moe(argc - 1, argv + 1);
    if (!strcmp(argv[1], "attention")) return bench_attention(argc - 1, argv + 1);
    if (!strcmp(argv[1], "tokenize")) return bench_tokenize(argc - 1, argv + 1);
    if (!strcmp(argv[1], "pool")) return bench_pool(argc - 1, argv + 1);
    if (!strcmp(argv[1], "python")) return bench_python(argc - 1, argv + 1);
    if (!strcmp(argv[1], "serve")) return bench_serve(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return bench_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "diffusion")) return bench_diffusion(argc - 1, argv + 1);
    fprintf(stderr, "ember bench: unknown benchmark '%s'\n", argv[1]);
    return 2;
}
