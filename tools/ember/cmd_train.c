/*
 * `ember train`: causal-LM training of a model on a token file, the contract of issue 19 item 6
 * (flags, windows, loss, --json lines), over the library's trainer (ember/train.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ember/ember.h"
#include "ember/train.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ember train --model ID_OR_DIR --data FILE --seq-len T --steps N --lr LR\n"
            "                   [--batch B] [--schedule constant|cosine] [--warmup W]\n"
            "                   [--weight-decay WD] [--beta1 0.9] [--beta2 0.999] [--eps 1e-8]\n"
            "                   [--grad-clip C] [--no-shuffle] [--seed S] [--dtype f32|bf16]\n"
            "                   [--val-fraction F --eval-every K] [--out DIR] [--save-every K]\n"
            "                   [--resume DIR] [--device D] [--dp N] [--gradient-checkpointing]\n"
            "                   [--json]\n\n"
            "Trains a decoder language model with AdamW on FILE: a .npy 1-D array of token ids,\n"
            "or text tokenized with the model's tokenizer (no special tokens). The ids are cut\n"
            "into floor(len / T) windows of T ids; with --no-shuffle step s trains on windows\n"
            "(s*B + b) mod K. The loss is transformers' causal-LM loss (position t predicts id\n"
            "t+1, mean over B*(T-1) predictions). --json prints one object per step on stdout:\n"
            "{\"step\", \"loss\", \"lr\", \"grad_norm\", \"tokens_per_s\"} (step 0-based; loss\n"
            "before the step's update; lr the rate that update used; \"val_loss\" added at evaluations).\n"
            "--out DIR writes a Hub folder (model.safetensors, config.json, generation and\n"
            "tokenizer files) and trainer_state.safetensors at the end (and to\n"
            "DIR/checkpoint-<step> every --save-every steps); --resume DIR continues such a run\n"
            "(its weights are loaded from DIR; give the same data, --seq-len, --batch, --steps,\n"
            "schedule, --seed and shuffle). --dtype bf16: bf16 weights and activations, f32\n"
            "master weights and AdamW state (the checkpoint in bf16). --device D trains on D (cpu,\n"
            "xla:0, ...: weights, gradients and AdamW state live there). --dp N: data parallel\n"
            "over the N processes of mpirun -np N (on the CPU), or with --device KIND (no index)\n"
            "over devices 0..N-1 of that kind in this process. --gradient-checkpointing:\n"
            "recompute each layer's activations in the backward (same losses, less memory, about\n"
            "a third more time). --compile: trace the whole step (forward, loss, backward,\n"
            "clipping, AdamW) once and replay it every step (a CPU plan, or one PJRT program on\n"
            "a device; with --dp, over mpirun's processes on the CPU).\n");
}

typedef struct train_args {
    const char *model, *data, *out, *resume, *device;
    em_train_options o;
    long long eval_every, save_every, dp;
    bool json;
    const char *dtype;
} train_args;

/* Parses argv; returns 0, or 2 after printing the error (1 for --help, printed). */
static int parse(int argc, char **argv, train_args *a) {
    const char *cmd = "train";
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;
        double x;
        if (!strcmp(k, "-h") || !strcmp(k, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(k, "--no-shuffle")) {
            a->o.shuffle = false;
            continue;
        } else if (!strcmp(k, "--json")) {
            a->json = true;
            continue;
        } else if (!strcmp(k, "--compile")) {
            a->o.compile = true;
            continue;
        } else if (!strcmp(k, "--gradient-checkpointing")) {
            a->o.gradient_checkpointing = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "ember train: %s needs a value (see ember train --help)\n", k);
            return 2;
        }
        i++;
#define INT(flag, lo, hi, dst)                                                                     \
    else if (!strcmp(k, flag)) {                                                                   \
        if (!cli_int(cmd, k, v, lo, hi, &n)) return 2;                                             \
        dst = n;                                                                                   \
    }
#define REAL(flag, lo, hi, dst)                                                                    \
    else if (!strcmp(k, flag)) {                                                                   \
        if (!cli_real(cmd, k, v, lo, hi, &x)) return 2;                                            \
        dst = x;                                                                                   \
    }
        if (!strcmp(k, "--model")) a->model = v;
        else if (!strcmp(k, "--data")) a->data = v;
        else if (!strcmp(k, "--out")) a->out = v;
        else if (!strcmp(k, "--resume")) a->resume = v;
        else if (!strcmp(k, "--device")) a->device = v;
        else if (!strcmp(k, "--dtype")) a->dtype = v;
        else if (!strcmp(k, "--schedule")) {
            if (!em_lr_schedule_parse(v, &a->o.schedule)) {
                fprintf(stderr, "ember train: --schedule '%s': constant or cosine\n", v);
                return 2;
            }
        }
        INT("--seq-len", 2, 1 << 24, a->o.seq_len)
        INT("--batch", 1, 1 << 20, a->o.batch)
        INT("--steps", 1, LLONG_MAX / 2, a->o.steps)
        INT("--warmup", 0, LLONG_MAX / 2, a->o.warmup)
        INT("--seed", 0, LLONG_MAX, a->o.seed)
        INT("--eval-every", 1, LLONG_MAX, a->eval_every)
        INT("--save-every", 1, LLONG_MAX, a->save_every)
        INT("--dp", 1, 1 << 16, a->dp)
        REAL("--lr", 0, INFINITY, a->o.lr)
        REAL("--weight-decay", 0, INFINITY, a->o.weight_decay)
        REAL("--beta1", 0, 0.999999999, a->o.beta1)
        REAL("--beta2", 0, 0.999999999, a->o.beta2)
        REAL("--eps", 0, INFINITY, a->o.eps)
        REAL("--grad-clip", 0, INFINITY, a->o.grad_clip)
        REAL("--val-fraction", 0, 0.99, a->o.val_fraction)
        else {
            fprintf(stderr, "ember train: unknown option '%s' (see ember train --help)\n", k);
            return 2;
        }
#undef INT
#undef REAL
    }
    const char *missing = !a->model && !a->resume ? "--model"
                          : !a->data              ? "--data"
                          : a->o.seq_len < 2      ? "--seq-len"
                          : a->o.steps < 1        ? "--steps"
                          : isnan(a->o.lr)        ? "--lr"
                                                  : NULL;
    if (missing) {
        fprintf(stderr, "ember train: %s is required (see ember train --help)\n", missing);
        return 2;
    }
    const char *not_yet = NULL;
    if (a->dtype && strcmp(a->dtype, "f32") && strcmp(a->dtype, "bf16"))
        not_yet = "--dtype: f32 or bf16 expected";
    else if (a->save_every && !a->out) not_yet = "--save-every needs --out DIR";
    else if (a->eval_every && !(a->o.val_fraction > 0))
        not_yet = "--eval-every needs --val-fraction F (the held-out share of the windows)";
    if (not_yet) {
        fprintf(stderr, "ember train: %s\n", not_yet);
        return 2;
    }
    return 0;
}

static void fmt_time(double s, char *buf, size_t n) {
    if (!(s >= 0) || s > 1e8) snprintf(buf, n, "?");
    else if (s >= 3600) snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    else snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
}

static int fail(em_ctx *c, const char *what) {
    const em_error *e = em_ctx_error(c);
    fprintf(stderr, "ember train: %s: %s\n", what, e ? e->message : "failed");
    return 1;
}

static int save(em_ctx *c, em_trainer *t, const char *dir) {
    if (em_trainer_save(c, t, dir)) return fail(c, "saving the checkpoint");
    fprintf(stderr, "ember train: saved %s (step %lld)\n", dir,
            (long long)em_trainer_steps_done(t));
    return 0;
}

/* mpirun's world size from its environment, 0 when not launched by it (Open MPI, PMIx, MPICH) */
static long launched_world(void) {
    const char *v[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (getenv(v[i])) return atol(getenv(v[i]));
    return 0;
}

/* --dp N > 1: joins the process group of mpirun, which must have N ranks. N = 1 under an mpirun
 * of several processes is refused too: the ranks would each train alone and write one folder. */
static int join_group(em_ctx *c, long long dp, em_dist **out) {
    *out = NULL;
    long w = launched_world();
    if (dp <= 1) {
        if (w <= 1) return 0;
        fprintf(stderr, "ember train: started as one of %ld processes (mpirun -np %ld) without "
                "--dp: pass --dp %ld for data-parallel training\n", w, w, w);
        return 2;
    }
    if (em_dist_init(c, NULL, out) != EM_OK) {
        fprintf(stderr, "ember train: --dp %lld: %s\n", dp, em_ctx_error(c)->message);
        return 1;
    }
    int ws = em_dist_world_size(*out);
    if (ws != dp)
        fprintf(stderr, "ember train: --dp %lld but %d process(es) were started: launch with "
                "mpirun -np %lld\n", dp, ws, dp);
    else if (!em_dist_has_mpi(*out))
        fprintf(stderr, "ember train: --dp %lld: the group has no MPI, and the gradients travel "
                "over MPI: launch with mpirun (EMBER_RANK/EMBER_WORLD_SIZE alone give a store, "
                "no tensor transport)\n", dp);
    if (ws != dp || !em_dist_has_mpi(*out)) {
        em_dist_free(*out);
        *out = NULL;
        return 2;
    }
    return 0;
}

/* One training run: the only process's, or one rank's of a data-parallel group (an mpirun
 * process, or a thread of a device group whose rank lives on em_dist_device(group): the model,
 * its gradients and AdamW's state are put there). `speak`: this rank prints and saves. */
static int train_run(const train_args *args, em_ctx *c, em_dist *group, bool speak) {
    train_args a = *args;
    a.o.group = group;
    em_device *gdev = group ? em_dist_device(group) : NULL;
    if (gdev) em_ctx_set_device(c, gdev); /* the trainer's zeros and constants go there too */
    em_model_options mo = em_model_default_options();
    mo.dtype = a.dtype && !strcmp(a.dtype, "bf16") ? EM_BF16 : EM_F32;
    mo.device = gdev ? em_device_name(gdev) : a.device;
    mo.moe_impl = EM_MOE_LOOP; /* trainable expert layout (ragged may pack experts at load) */
    const char *src = a.resume ? a.resume : a.model;
    if (a.resume && a.model)
        fprintf(stderr, "ember train: resuming: the weights come from %s, not %s\n", a.resume,
                a.model);
    em_model *m = em_model_load(c, src, &mo);
    em_tokenizer *tok = NULL;
    em_train_data *d = NULL;
    em_trainer *t = NULL;
    int rc = 0;
    if (!m) {
        rc = fail(c, "loading the model");
        goto done;
    }
    em_model_set_moe_impl(m, EM_MOE_RAGGED); /* faster, and trains through ragged_dot */
    {
        size_t dl = strlen(a.data);
        if (!(dl > 4 && !strcmp(a.data + dl - 4, ".npy"))) {
            tok = em_tokenizer_load(c, em_model_dir(m));
            if (!tok) {
                rc = fail(c, "the text data needs the model's tokenizer");
                goto done;
            }
        }
    }
    d = em_train_data_load(c, a.data, tok, em_model_config_get(m)->vocab_size);
    if (!d) {
        rc = fail(c, "reading the data");
        goto done;
    }
    t = em_trainer_create(c, m, d, &a.o);
    if (!t) {
        rc = fail(c, "setting up training");
        goto done;
    }
    if (a.resume && em_trainer_resume(c, t, a.resume)) {
        rc = fail(c, "resuming");
        goto done;
    }
    if (!a.json && speak) {
        fprintf(stderr,
                "ember train: %s, %lld ids, %lld training windows of %lld (%lld held out), "
                "batch %lld, %lld steps\n",
                src, (long long)em_train_data_len(d), (long long)em_trainer_train_windows(t),
                (long long)a.o.seq_len, (long long)em_trainer_val_windows(t),
                (long long)a.o.batch, (long long)a.o.steps);
        if (group)
            fprintf(stderr, "ember train: data parallel over %d %s, %lld windows each\n",
                    em_dist_world_size(group), gdev ? "devices" : "processes",
                    (long long)(a.o.batch / a.dp));
    }
    bool tty = isatty(2);
    double total_s = 0;
    int64_t timed = 0;
    while (em_trainer_steps_done(t) < a.o.steps) {
        em_train_step_info s;
        if (em_trainer_step(c, t, &s)) {
            rc = fail(c, "training");
            goto done;
        }
        int64_t n_done = s.step + 1;
        double tps = s.seconds > 0 ? (double)s.tokens / s.seconds : 0, val = NAN;
        bool eval = a.eval_every && (n_done % a.eval_every == 0 || n_done == a.o.steps);
        if (eval && em_trainer_eval(c, t, &val)) {
            rc = fail(c, "evaluating");
            goto done;
        }
        if (speak && a.json) {
            printf("{\"step\": %lld, \"loss\": %.17g, \"lr\": %.17g, \"grad_norm\": %.17g, "
                   "\"tokens_per_s\": %.1f",
                   (long long)s.step, s.loss, s.lr, s.grad_norm, tps);
            if (eval) printf(", \"val_loss\": %.17g", val);
            printf("}\n");
            fflush(stdout);
        } else if (speak) {
            total_s += s.seconds;
            timed++;
            char left[32];
            fmt_time(total_s / (double)timed * (double)(a.o.steps - n_done), left, sizeof left);
            fprintf(stderr, "%sstep %lld/%lld  loss %.4f  lr %.3g  grad norm %.3g  %.0f tok/s  "
                            "%s left%s",
                    tty ? "\r" : "", (long long)n_done, (long long)a.o.steps, s.loss, s.lr,
                    s.grad_norm, tps, left, tty ? "   " : "\n");
            if (eval) fprintf(stderr, "%sstep %lld  val loss %.4f\n", tty ? "\n" : "",
                              (long long)n_done, val);
        }
        if (speak && a.save_every && n_done % a.save_every == 0 && n_done < a.o.steps) {
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/checkpoint-%lld", a.out, (long long)n_done);
            if ((rc = save(c, t, dir))) goto done;
        }
    }
    if (!a.json && tty && speak) fprintf(stderr, "\n");
    if (a.out && speak) rc = save(c, t, a.out);
done:
    em_trainer_free(t);
    em_train_data_free(d);
    em_tokenizer_free(tok);
    em_model_free(m);
    return rc;
}

/* A rank of a --dp N device group (cli_device_group). */
static int group_rank(void *arg, em_ctx *c, em_dist *g, bool speak) {
    return train_run(arg, c, g, speak);
}

/* The device kind of --dp N --device KIND (no index: N devices of that kind), else NULL. */
static const char *device_group_kind(const train_args *a) {
    if (a->dp <= 1 || !a->device || strchr(a->device, ':') || !strcmp(a->device, "cpu"))
        return NULL;
    return a->device;
}

int cmd_train(int argc, char **argv) {
    train_args a = {.o = em_train_default_options()};
    a.o.lr = NAN; /* required */
    int r = parse(argc, argv, &a);
    if (r) return r == 1 ? 0 : 2;
    em_ctx *c = em_ctx_create();
    const char *kind = device_group_kind(&a);
    if (kind) {
        r = cli_device_group(c, "train --dp", kind, (int)a.dp, group_rank, &a);
    } else {
        em_dist *group = NULL;
        r = join_group(c, a.dp, &group);
        if (!r && group && a.device && strcmp(a.device, "cpu") && strcmp(a.device, "cpu:0")) {
            fprintf(stderr, "ember train: --dp %lld over mpirun processes trains on the CPU (the "
                    "gradients travel over MPI); for N devices of one process give the device "
                    "kind without an index: --dp N --device xla\n", a.dp);
            r = 2;
        }
        /* data parallel: rank 0 prints and saves; every rank reports errors */
        if (!r) r = train_run(&a, c, group, !group || em_dist_rank(group) == 0);
        em_dist_free(group);
    }
    em_ctx_free(c);
    return r;
}
