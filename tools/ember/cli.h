/* The ember command-line tool: subcommands and shared helpers. */
#ifndef EMBER_CLI_H
#define EMBER_CLI_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "ember/dist.h"
#include "ember/generate.h"

typedef struct em_cli_cmd {
    const char *name;    /* "devices", "bench" */
    const char *summary; /* one line for `ember --help` */
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand's name */
} em_cli_cmd;

int cmd_devices(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_make_checkpoint(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_download(int argc, char **argv);
int cmd_kernels(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_test_devices(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_train_ddpm(int argc, char **argv);
int cmd_image(int argc, char **argv);
int cmd_project(int argc, char **argv);

/* Sampling options (--greedy, --temperature, --top-k, --top-p, --min-p, --seed,
 * --repetition-penalty), given over the model's generation config. */
typedef struct cli_sampling {
    bool greedy, have[6];
    double temperature, top_p, min_p, rep;
    long long top_k, seed;
} cli_sampling;
/* Consumes argv[*i] (and its value) when it is a sampling option; returns 1 then, 0 when it is
 * not one, -1 when its value is not a valid number (the error is printed, naming `cmd`). */
int cli_sampling_arg(const char *cmd, cli_sampling *s, int argc, char **argv, int *i);
void cli_sampling_apply(const cli_sampling *s, em_generate_params *p);

/* Strict numbers for option values (tools/ember/cli_num.c). `cmd` is the command as the user
 * typed it after "ember" ("generate", "bench decode"), `opt` the option ("--max-new-tokens").
 * The whole of `text` must be a number within [lo, hi]; otherwise an error naming the option
 * and the value goes to stderr and the result is false (-1 for a list). */
bool cli_int(const char *cmd, const char *opt, const char *text, long long lo, long long hi,
             long long *out);
bool cli_real(const char *cmd, const char *opt, const char *text, double lo, double hi,
              double *out);
/* A comma-separated list of integers ("1,16"), at most `max`; returns the count, -1 on error. */
int cli_int_list(const char *cmd, const char *opt, const char *text, long long lo, long long hi,
                 long long *out, int max);

/* True if argv holds -h or --help. */
bool cli_wants_help(int argc, char **argv);

/* One rank's work: its context, its handle of the group, whether it prints. Returns an exit
 * status (0 ok). */
typedef int (*cli_rank_fn)(void *arg, em_ctx *c, em_dist *g, bool speak);
/* Runs fn on ranks 0..n-1 of a device group of this process (em_dist_local on devices 0..n-1
 * of `kind`): rank 0 on this thread with c, speaking; the others on threads of their own,
 * each with its own context, silently. `what` starts the error messages ("generate --tp").
 * Returns rank 0's status, else the first failing rank's (cli_ranks.c). */
int cli_device_group(em_ctx *c, const char *what, const char *kind, int n, cli_rank_fn fn,
                     void *arg);

#endif
