/* Shared pieces of the `ember bench` commands: timing, peers run in a subprocess, output. */
#ifndef EMBER_BENCH_UTIL_H
#define EMBER_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>

double bench_now(void);
/* Median time in ms of fn(user) over repetitions lasting at least min_s seconds (>= 3 reps,
 * after one warm-up call). */
double bench_median_ms(void (*fn)(void *user), void *user, double min_s);

/* Results of a peer script: name -> ms (negative when the peer failed that task). */
typedef struct bench_peer {
    bool available;
    char why[1200]; /* why not, when unavailable */
    int n;
    char names[128][64];
    double ms[128];
} bench_peer;

/* Runs tools/ember/peers/<script> with $EMBER_PYTHON (default python3), feeding tasks_json on
 * stdin. Never fails hard: an absent interpreter or library gives available = false. */
void bench_peer_run(const char *script, const char *tasks_json, bench_peer *out);
/* llama.cpp's llama-bench ($EMBER_LLAMA_BENCH, or on PATH) on a GGUF file with `threads`
 * threads: "prefill" (512 tokens) and "decode_1" (ms per generated token) (bench_llamacpp.c). */
void bench_llamacpp_run(const char *gguf, int threads, int n_gen, bench_peer *out);
/* ms of a named task, or -1. */
double bench_peer_ms(const bench_peer *p, const char *name);

/* One result line: a table row, or with json a JSON object in the format. */
typedef struct bench_row {
    const char *bench;  /* e.g. "add", "matmul", "decode_linear" */
    const char *shape;  /* e.g. "[2048,2048,2048]" */
    const char *dtype;
    double ms;          /* Ember's time */
    double limit_ms;    /* the machine's bound for the same work (<= 0: none) */
    const char *limit_what; /* what the limit is ("read bandwidth", "fp32 peak", ...) */
    const char *peer;   /* NULL if no peer */
    double peer_ms;     /* < 0 if none */
    double flops;       /* the work, for a roofline (<= 0: not given) */
    double bytes;       /* the bytes it must move (<= 0: not given) */
} bench_row;
void bench_print_row(const bench_row *r, bool json);
/* A table cell: v printed with fmt (one double conversion), or "-" when v <= 0 (not measured:
 * an implementation left out, no peer). Returns buf. */
const char *bench_cell(char *buf, size_t n, const char *fmt, double v);
void bench_print_header(bool json);
/* The machine line every benchmark starts with: the CPU kernel level in use (EMBER_CPU_LEVEL
 * lowers it), the CPU's name and features, and the thread count; with json one object
 * {"bench": "machine", ...}. */
void bench_print_machine(bool json);
/* Caps the peers (OpenBLAS, torch) to the kernel level EMBER_CPU_LEVEL asked for, and says so. */
void bench_match_peers_to_level(bool json);

/* The random-weight checkpoint of a benchmark preset ("qwen3-0.6b" or "qwen3-30b-a3b"), made by
 * `ember make-checkpoint` into <cache>/<prefix><preset> unless its config.json is already there;
 * layers <= 0 picks the benchmarks' default depth (28 for 0.6b, 12 for 30b-a3b: a bounded slice
 * whose per-layer time is what the figures report). Writes the folder to dir. Returns 0, 2 for an
 * unknown preset (message names `who`), 1 when the checkpoint cannot be made. */
int bench_preset_dir(const char *who, const char *cache, const char *prefix, const char *preset,
                     long long layers, char *dir, size_t n);
/* The same for any `ember make-checkpoint` preset into dir (made unless its config.json is
 * there), with layers (<= 0: the preset's) and dtype ("bf16", "f32"; NULL: the default).
 * Returns 0, or 1 when the checkpoint cannot be made. */
int bench_checkpoint(const char *dir, const char *preset, long long layers, const char *dtype);

#endif
