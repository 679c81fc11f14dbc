/* The ember command-line tool: subcommands and shared helpers. */
#ifndef EMBER_CLI_H
#define EMBER_CLI_H

#include <stdbool.h>

#include "ember/generate.h"

typedef struct em_cli_cmd {
    const char *name;    /* "devices", "bench" */
    const char *summary; /* one line for `ember --help` */
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand's name */
} em_cli_cmd;

int cmd_devices(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_make_checkpoint(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_download(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_test_devices(int argc, char **argv);

/* Sampling options (--greedy, --temperature, --top-k, --top-p, --min-p, --seed,
 * --repetition-penalty), given over the model's generation config. */
typedef struct cli_sampling {
    bool greedy, have[6];
    double temperature, top_p, min_p, rep;
    long long top_k, seed;
} cli_sampling;
/* Consumes argv[*i] (and its value) when it is a sampling option; true then. */
bool cli_sampling_arg(cli_sampling *s, int argc, char **argv, int *i);
void cli_sampling_apply(const cli_sampling *s, em_generate_params *p);

/* True if argv holds -h or --help. */
bool cli_wants_help(int argc, char **argv);

#endif
