/*
 * ember/train.h — causal-LM training of a loaded decoder: the loop `ember train` runs, as a
 * library (Python bindings and the server reuse it).
 *
 *     em_train_data *d = em_train_data_load(c, "ids.npy", NULL, vocab);
 *     em_train_options o = em_train_default_options();
 *     o.seq_len = 128; o.batch = 8; o.steps = 1000; o.lr = 3e-4;
 *     em_trainer *t = em_trainer_create(c, model, d, &o);
 *     for (em_train_step_info s; em_trainer_steps_done(t) < o.steps;)
 *         if (em_trainer_step(c, t, &s)) break;
 *     em_trainer_save(c, t, "out/");   // a Hub folder transformers loads, plus the state to resume
 *
 * Data. The ids are cut into K = floor(len / T) non-overlapping windows of T ids (a partial tail
 * is dropped); with val_fraction F the last max(1, floor(F K)) windows are held out for
 * em_trainer_eval. Without shuffle, step s trains on windows (s B + b) mod K_train for
 * b = 0..B-1. With shuffle, the same global positions g = s B + b read window perm_e(g mod
 * K_train) of epoch e = g / K_train, where perm_e is a Fisher-Yates permutation drawn from
 * splitmix64 seeded with (seed, e): the data position and the only random state are functions
 * of (seed, step), which is what makes a resumed run bit-identical.
 *
 * Loss. Each window is both the input and the labels: transformers' causal-LM loss, position t
 * predicts id t+1, the mean over the B (T - 1) predictions. Optimizer: AdamW over every
 * parameter in one group (weight decay on all, as torch.optim.AdamW(model.parameters())), the
 * gradient clipped to grad_clip (torch's clip_grad_norm_; the reported norm is the total before
 * clipping), the learning rate of update s = lr * schedule(s) (transformers' LambdaLR schedules:
 * the first update uses schedule(0), which is 0 during a warmup).
 *
 * Data parallel. With options.group, the process is one of the group's W ranks (mpirun): every
 * rank holds the whole model and optimizer, takes B / W of the step's B windows (rank r the
 * global positions s B + r B / W .. s B + (r + 1) B / W - 1, the same windows one process would
 * read), and the gradients and the loss are averaged over the group before clipping and AdamW,
 * which then run identically on every rank. Results equal one process's on the whole batch up
 * to summation order.
 */
#ifndef EMBER_TRAIN_H
#define EMBER_TRAIN_H

#include "ember/compile.h"
#include "ember/dist.h"
#include "ember/model.h"
#include "ember/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- data ---- */

typedef struct em_train_data em_train_data;

/**
 * Token ids for training from `path`: a .npy file holding a 1-D array of integers (any of numpy's
 * integer dtypes, either byte order, C order), or else a UTF-8 text file tokenized with `tok`
 * (no special tokens added; tok NULL: text is refused naming the file). Every id must lie in
 * [0, vocab) (vocab <= 0: not checked). NULL with an error naming the file: EM_ERR_IO when it
 * cannot be read, EM_ERR_FORMAT for a malformed .npy, EM_ERR_DTYPE for a non-integer one (its
 * dtype named), EM_ERR_SHAPE for an array that is not 1-D, EM_ERR_INDEX for an id outside the
 * vocabulary (its position and value named). Free with em_train_data_free.
 */
EM_API em_train_data *em_train_data_load(em_ctx *c, const char *path, const em_tokenizer *tok,
                                         int64_t vocab);
/** The same from ids in memory (copied); `name` names them in messages (may be NULL). */
EM_API em_train_data *em_train_data_from_ids(em_ctx *c, const int64_t *ids, int64_t n,
                                             int64_t vocab, const char *name);
EM_API void em_train_data_free(em_train_data *d);
/** Number of ids, and the ids themselves (owned by d). */
EM_API int64_t em_train_data_len(const em_train_data *d);
EM_API const int64_t *em_train_data_ids(const em_train_data *d);

/* ---- the trainer ---- */

typedef enum em_lr_schedule { EM_LR_CONSTANT, EM_LR_COSINE } em_lr_schedule;

typedef struct em_train_options {
    int64_t seq_len;        /* T, ids per window (required, >= 2) */
    int64_t batch;          /* B, windows per step (1) */
    int64_t steps;          /* total steps: the cosine schedule's length (required) */
    double lr;              /* base learning rate (1e-3) */
    em_lr_schedule schedule;/* constant (with warmup) or cosine with warmup (constant) */
    int64_t warmup;         /* warmup steps (0) */
    double weight_decay;    /* AdamW's decoupled weight decay (0.01, torch's default) */
    double beta1, beta2, eps; /* 0.9, 0.999, 1e-8 */
    double grad_clip;       /* max total gradient norm; 0: no clipping (the norm is reported) */
    bool shuffle;           /* false: the windows in order (see above) (true) */
    uint64_t seed;          /* the shuffle's seed (0) */
    double val_fraction;    /* share of the windows held out for em_trainer_eval (0) */
    em_dist *group;         /* data parallel over this process group (borrowed; it must outlive
                               the trainer; collectives over MPI); batch must divide by its world
                               size. NULL: this process alone (NULL) */
    bool gradient_checkpointing; /* recompute each layer's activations in the backward
                               (em_model_set_gradient_checkpointing, set on the model by
                               em_trainer_create): same gradients, activation memory of one layer
                               instead of all, about one more forward per step (false) */
    bool compile;           /* trace the whole step (forward, loss, backward, clipping, AdamW)
                               once with em_compile and replay the program every step: a CPU
                               plan, or one PJRT program on a device. The step's numbers (rate,
                               bias corrections) are inputs, so all steps share one program.
                               Takes f32 weights or bf16/f16 with f32 masters, gradient
                               checkpointing, the router load-balancing loss, and a `group` of
                               MPI ranks on the CPU (the averaging's collectives run in each
                               rank's plan); a group of PJRT devices is EM_ERR_UNSUPPORTED from
                               em_trainer_create. Needs a gradient for every parameter (else
                               EM_ERR_UNSUPPORTED at the first step). Evaluation stays eager
                               (false) */
} em_train_options;

/** The defaults above (seq_len and steps 0: to be set). */
EM_API em_train_options em_train_default_options(void);
EM_API const char *em_lr_schedule_name(em_lr_schedule s);
/** "constant" or "cosine"; false for anything else. */
EM_API bool em_lr_schedule_parse(const char *name, em_lr_schedule *out);

typedef struct em_trainer em_trainer;

/**
 * A trainer of model m (a decoder whose parameters em_model_params lists; they are updated in
 * place) on data d; both must outlive it. f32 weights train as they are; bf16 or f16 weights in
 * mixed precision: the trainer keeps f32 master copies, which AdamW (f32 state) updates and
 * which are rounded into the weights after each step. NULL with an error for invalid options
 * (named), a seq_len above the model's max_position_embeddings, data shorter than one window (or
 * no training window left after the validation share), or a model that cannot train
 * (em_model_params' error; EM_ERR_UNSUPPORTED for a model that reads weights which are neither
 * parameters nor transformers' saved buffers: its checkpoints would lack them). Buffers (Gemma
 * 4's layer_scalar) stay frozen: no gradient, no optimizer state, written into checkpoints.
 */
EM_API em_trainer *em_trainer_create(em_ctx *c, em_model *m, const em_train_data *d,
                                     const em_train_options *o);
EM_API void em_trainer_free(em_trainer *t);

/** What one step did. */
typedef struct em_train_step_info {
    int64_t step;     /* 0-based index of the step just taken */
    double loss;      /* its forward loss, before the update */
    double lr;        /* the rate its update used */
    double grad_norm; /* total gradient norm before clipping */
    int64_t tokens;   /* B * T ids read */
    double seconds;   /* wall time of the step */
} em_train_step_info;

/**
 * One training step (forward, loss, backward, clipping, AdamW update with the scheduled rate) on
 * the windows of step em_trainer_steps_done(t). Returns the status; info may be NULL. Data
 * parallel: a collective (every rank calls it, as often); loss and grad_norm are the group's,
 * tokens the whole step's B * T.
 */
EM_API em_status em_trainer_step(em_ctx *c, em_trainer *t, em_train_step_info *info);
/** Steps taken so far (counting those of a resumed run). */
EM_API int64_t em_trainer_steps_done(const em_trainer *t);
/** Windows used for training and held out. */
EM_API int64_t em_trainer_train_windows(const em_trainer *t);
EM_API int64_t em_trainer_val_windows(const em_trainer *t);
/**
 * Mean loss over the held-out windows (grad off, batches of B). EM_ERR_INVALID_ARG when there
 * are none (val_fraction 0). Data parallel: every rank evaluates all of them (no collective).
 */
EM_API em_status em_trainer_eval(em_ctx *c, em_trainer *t, double *val_loss);

/**
 * Writes a Hub-layout checkpoint into dir (created if missing): model.safetensors with the
 * parameters under the Hub's names in the model's dtype (a tied LM head once, as transformers
 * saves it) and the saved buffers (Gemma 4's layer_scalar, unchanged), config.json and
 * generation_config.json copied from the model's folder (the latter written from the model's
 * generation config when it has none), the tokenizer files it has
 * (tokenizer.json, tokenizer_config.json, ...) copied; and trainer_state.safetensors: the AdamW
 * moments, the f32 masters (mixed precision), per-parameter step counts, the step, and the
 * options the data order depends on, so
 * that em_trainer_resume continues bit-identically. EM_ERR_IO naming the path on failure.
 * Data parallel: every rank holds the same state, so one rank (rank 0) saves.
 */
EM_API em_status em_trainer_save(em_ctx *c, em_trainer *t, const char *dir);
/**
 * Restores the optimizer state and the step from dir/trainer_state.safetensors, written by
 * em_trainer_save. The model must have been loaded from that folder (its weights are the
 * saved ones). seq_len, batch, shuffle, seed and val_fraction must equal the saved run's
 * (EM_ERR_INVALID_ARG naming the first that differs), as must the parameter names and shapes.
 * Data parallel: every rank resumes from the same folder; the world size may differ from the
 * saved run's (the data order depends on the step, not on the ranks).
 */
EM_API em_status em_trainer_resume(em_ctx *c, em_trainer *t, const char *dir);

/**
 * The counters of the compiled step (options.compile; ember/compile.h's em_compile_stats: how
 * many programs were compiled, of how many ops); zeros before the first step or without
 * options.compile.
 */
EM_API void em_trainer_compile_stats(const em_trainer *t, em_compile_stats *out);

#ifdef __cplusplus
}
#endif
#endif
