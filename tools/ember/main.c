/* ember: the command-line tool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ember/ember.h"

static const em_cli_cmd commands[] = {
    {"generate", "generate text with a model (Hub id, folder or GGUF file)", cmd_generate},
    {"chat", "a conversation with a model through its chat template (streams, /reset)",
     cmd_chat},
    {"train", "train a language model on a token or text file (AdamW, Hub checkpoints out)",
     cmd_train},
    {"train-ddpm", "train a small DDPM on 8x8 digits, saved as a diffusers DDPMPipeline folder",
     cmd_train_ddpm},
    {"image", "an image from a diffusers pipeline folder (DDPM, DDIM), PNG and .npy out",
     cmd_image},
    {"serve", "an OpenAI-compatible HTTP server with continuous batching", cmd_serve},
    {"embed", "sentence embeddings and semantic search (all-MiniLM-L6-v2, BERT encoders)",
     cmd_embed},
    {"make-checkpoint", "write a checkpoint with random weights (demos, benchmarks)",
     cmd_make_checkpoint},
    {"devices", "list devices and their properties", cmd_devices},
    {"bench", "measure Ember against the machine's limits and peers (ops, ...)", cmd_bench},
    {"report", "run the benchmarks on every device: plots, $ per 1M tokens, projections",
     cmd_report},
    {"project", "tensor-parallel decode on paper: collective bytes, projected tokens/s",
     cmd_project},
    {"download", "fetch a model from the Hugging Face Hub into its cache", cmd_download},
    {"kernels", "kernel packages: list, explain, lock, download (docs/kernels.md)", cmd_kernels},
    {"tokenize", "encode text to token ids, or decode ids, with a tokenizer.json", cmd_tokenize},
    {"test-devices", "run the op conformance suite on every device (PJRT) vs torch and CPU",
     cmd_test_devices},
};

bool cli_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return true;
    return false;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ember <command> [options]\n\n"
               "Ember %s: Hugging Face models on any device, from C.\n\ncommands:\n",
            em_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-14s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRun `ember <command> --help` for a command's options.\n"
               "Environment: EMBER_NUM_THREADS (CPU threads), EMBER_EAGER=sync|async|fused,\n"
               "EMBER_KERNELS=SPEC,... (or `ember --kernels SPECS <command>`; none: hub off).\n");
}

int main(int argc, char **argv) {
    /* `ember --kernels SPECS <command>`: kernel packages for this run ("none": the hub off) */
    if (argc >= 3 && !strcmp(argv[1], "--kernels")) {
        setenv("EMBER_KERNELS", argv[2], 1);
        argc -= 2;
        argv += 2;
    }
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("ember %s\n", em_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "ember: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
