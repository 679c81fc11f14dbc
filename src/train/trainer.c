/*
 * The causal-LM training loop (ember/train.h): windows of the data, forward without a KV cache,
 * transformers' shifted cross-entropy, backward, clip_grad_norm_, AdamW with a LambdaLR-style
 * schedule. Checkpoints are in checkpoint.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/model_impl.h" /* em_model_buffers, em_model_unlisted_weights */
#include "train/optim_impl.h"  /* em_train_snapshot */
#include "train/trainer_impl.h"

em_train_options em_train_default_options(void) {
    return (em_train_options){.batch = 1, .lr = 1e-3, .schedule = EM_LR_CONSTANT,
                              .weight_decay = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                              .shuffle = true};
}

const char *em_lr_schedule_name(em_lr_schedule s) {
    return s == EM_LR_COSINE ? "cosine" : "constant";
}

bool em_lr_schedule_parse(const char *name, em_lr_schedule *out) {
    if (!name) return false;
    if (!strcmp(name, "constant")) *out = EM_LR_CONSTANT;
    else if (!strcmp(name, "cosine")) *out = EM_LR_COSINE;
    else return false;
    return true;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* The permutation of the training windows for epoch e (Fisher-Yates, splitmix64 of seed, e). */
static void make_perm(em_trainer *t, int64_t e) {
    int64_t k = t->k_train;
    for (int64_t i = 0; i < k; i++) t->perm[i] = i;
    uint64_t s = t->o.seed * UINT64_C(0x100000001B3) ^ (uint64_t)e;
    for (int64_t i = k - 1; i > 0; i--) {
        int64_t j = (int64_t)(splitmix64(&s) % (uint64_t)(i + 1));
        int64_t tmp = t->perm[i];
        t->perm[i] = t->perm[j];
        t->perm[j] = tmp;
    }
    t->perm_epoch = e;
}

int64_t em_trainer_window(em_trainer *t, int64_t g) {
    int64_t k = t->k_train, pos = g % k;
    if (!t->o.shuffle) return pos;
    if (t->perm_epoch != g / k) make_perm(t, g / k);
    return t->perm[pos];
}

static bool check_options(em_ctx *c, const em_train_options *o) {
    const char *bad = NULL;
    if (o->seq_len < 2) bad = "seq_len must be at least 2";
    else if (o->batch < 1) bad = "batch must be at least 1";
    else if (o->steps < 1) bad = "steps must be at least 1";
    else if (!(o->lr >= 0)) bad = "lr must be >= 0";
    else if (o->warmup < 0) bad = "warmup must be >= 0";
    else if (!(o->weight_decay >= 0)) bad = "weight_decay must be >= 0";
    else if (!(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1))
        bad = "betas must lie in [0, 1)";
    else if (!(o->eps >= 0)) bad = "eps must be >= 0";
    else if (!(o->grad_clip >= 0)) bad = "grad_clip must be >= 0 (0: none)";
    else if (!(o->val_fraction >= 0 && o->val_fraction < 1))
        bad = "val_fraction must lie in [0, 1)";
    else if (o->schedule != EM_LR_CONSTANT && o->schedule != EM_LR_COSINE) bad = "unknown schedule";
    if (bad) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "trainer", "%s", bad);
        return false;
    }
    int w = o->group ? em_dist_world_size(o->group) : 1;
    if (o->batch % w) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "trainer",
                    "batch %lld does not divide by the data-parallel world size %d (every rank "
                    "takes batch / world windows of each step)", (long long)o->batch, w);
        return false;
    }
    return true;
}

em_trainer *em_trainer_create(em_ctx *c, em_model *m, const em_train_data *d,
                              const em_train_options *opt) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!m || !d || !opt) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "trainer", "NULL model, data or options");
        return NULL;
    }
    if (!check_options(c, opt)) return NULL;
    const em_model_config *cfg = em_model_config_get(m);
    if (!em_model_is_causal_lm(m)) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "trainer", "%s is not a decoder language model",
                    em_model_dir(m));
        return NULL;
    }
    if (cfg->max_position_embeddings > 0 && opt->seq_len > cfg->max_position_embeddings) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "trainer",
                    "seq_len %lld is longer than the model's max_position_embeddings %lld (%s)",
                    (long long)opt->seq_len, (long long)cfg->max_position_embeddings,
                    em_model_dir(m));
        return NULL;
    }
    /* transformers' gradient_checkpointing_enable(): a setting of the model (it stays set) */
    if (opt->gradient_checkpointing && em_model_set_gradient_checkpointing(c, m, true))
        return NULL;
    int64_t n = em_train_data_len(d), k = n / opt->seq_len;
    if (k < 1) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "trainer",
                    "the data has %lld ids, fewer than one window of seq_len %lld",
                    (long long)n, (long long)opt->seq_len);
        return NULL;
    }
    int64_t k_val = 0;
    if (opt->val_fraction > 0) {
        k_val = (int64_t)floor(opt->val_fraction * (double)k);
        if (k_val < 1) k_val = 1;
    }
    if (k - k_val < 1) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "trainer",
                    "the data has %lld windows of %lld ids: none left for training after holding "
                    "out %lld for validation", (long long)k, (long long)opt->seq_len,
                    (long long)k_val);
        return NULL;
    }
    em_dtype dt = em_model_dtype(m);
    if (dt != EM_F32 && dt != EM_BF16 && dt != EM_F16) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "trainer",
                    "the model's weights are %s: f32, or bf16/f16 with f32 master weights",
                    em_dtype_name(dt));
        return NULL;
    }
    int np = em_model_params(c, m, NULL, 0);
    if (np < 0) return NULL;
    /* the checkpoints hold the parameters and the saved buffers (frozen): nothing else */
    int unlisted = em_model_unlisted_weights(c, m), nb = em_model_buffers(m, NULL, 0);
    if (unlisted < 0) return NULL;
    if (unlisted > 0) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "trainer",
                    "%s (%s) reads %d weights that are neither parameters nor buffers: its "
                    "checkpoints would lack them", em_model_dir(m),
                    em_model_config_get(m)->model_type, unlisted);
        return NULL;
    }
    em_trainer *t = calloc(1, sizeof *t);
    if (t) {
        t->buffers = calloc((size_t)(nb > 0 ? nb : 1), sizeof *t->buffers);
        t->params = calloc((size_t)(np ? np : 1), sizeof *t->params);
        t->tensors = calloc((size_t)(np ? np : 1), sizeof *t->tensors);
        t->master = dt != EM_F32 ? calloc((size_t)(np ? np : 1), sizeof *t->master) : NULL;
        t->perm = malloc((size_t)k * sizeof *t->perm);
        t->batch_ids = malloc((size_t)(opt->batch * opt->seq_len) * sizeof *t->batch_ids);
    }
    if (!t || !t->buffers || !t->params || !t->tensors || !t->perm || !t->batch_ids ||
        (dt != EM_F32 && !t->master)) {
        em_trainer_free(t);
        em_ctx_fail(c, EM_ERR_OOM, "trainer", "out of memory");
        return NULL;
    }
    t->m = m;
    t->d = d;
    t->o = *opt;
    t->k = k;
    t->k_val = k_val;
    t->k_train = k - k_val;
    t->perm_epoch = -1;
    t->np = em_model_params(c, m, t->params, np);
    t->nb = em_model_buffers(m, t->buffers, nb); /* frozen: no gradient, no optimizer state */
    for (int i = 0; i < np; i++) {
        t->tensors[i] = t->params[i].tensor;
        em_tensor_requires_grad(c, t->tensors[i], true);
        if (t->master) { /* an f32 copy, the leaf the optimizer updates */
            em_scope_push(c);
            em_tensor *f = em_cast(c, t->tensors[i], EM_F32);
            t->master[i] = f ? em_train_snapshot(c, f) : NULL;
            em_scope_pop(c);
            if (t->master[i]) em_tensor_requires_grad(c, t->master[i], true);
        }
    }
    t->trained = t->master ? t->master : t->tensors;
    em_adamw_options a = {.lr = opt->lr, .beta1 = opt->beta1, .beta2 = opt->beta2, .eps = opt->eps,
                          .weight_decay = opt->weight_decay};
    t->opt = em_ctx_status(c) ? NULL : em_adamw_create(c, t->trained, np, &a);
    if (!t->opt) {
        em_trainer_free(t);
        return NULL;
    }
    return t;
}

void em_trainer_free(em_trainer *t) {
    if (!t) return;
    /* the weights stay marked as requiring grad: harmless while grad is off (the default) */
    for (int i = 0; t->tensors && i < t->np; i++) em_tensor_zero_grad(t->tensors[i]);
    em_compiled_free(t->cstep);
    em_optimizer_free(t->opt);
    for (int i = 0; t->master && i < t->np; i++) em_tensor_release(t->master[i]);
    free(t->master);
    free(t->params);
    free(t->buffers);
    free(t->tensors);
    free(t->perm);
    free(t->batch_ids);
    free(t);
}

int64_t em_trainer_steps_done(const em_trainer *t) { return t ? t->step : 0; }
int64_t em_trainer_train_windows(const em_trainer *t) { return t ? t->k_train : 0; }
int64_t em_trainer_val_windows(const em_trainer *t) { return t ? t->k_val : 0; }

em_tensor *em_trainer_batch_ids(em_ctx *c, em_trainer *t, const int64_t *w, int64_t b) {
    int64_t T = t->o.seq_len;
    const int64_t *ids = em_train_data_ids(t->d);
    for (int64_t i = 0; i < b; i++)
        memcpy(t->batch_ids + i * T, ids + w[i] * T, (size_t)T * sizeof *ids);
    return em_from_host(c, EM_I64, 2, (int64_t[]){b, T}, t->batch_ids);
}

/* transformers' causal-LM loss, plus router_aux_loss_coef times the router's load-balancing
 * loss when the config asks for it (output_router_logits), as its MoE models' forward with
 * labels does. */
em_tensor *em_trainer_loss(em_ctx *c, em_trainer *t, em_tensor *x) {
    if (!x) return NULL;
    const em_model_config *cfg = em_model_config_get(t->m);
    int64_t b = em_tensor_dim(x, 0), T = em_tensor_dim(x, 1), V = cfg->vocab_size;
    em_tensor *aux = NULL;
    em_tensor *logits = cfg->output_router_logits && cfg->num_experts > 0
                            ? em_model_forward_router_aux(c, t->m, x, &aux)
                            : em_model_forward(c, t->m, x, NULL, NULL, false);
    if (!logits) return NULL;
    em_tensor *pred = em_reshape(c, em_slice(c, logits, 1, 0, T - 1, 1), 2,
                                 (int64_t[]){b * (T - 1), V});
    /* the labels on the logits' device (a PJRT device when the model is there) */
    em_tensor *next = em_reshape(c, em_slice(c, x, 1, 1, T, 1), 1, (int64_t[]){b * (T - 1)});
    if (em_tensor_device(logits) != em_tensor_device(next))
        next = em_to(c, next, em_tensor_device(logits));
    em_tensor *loss = em_cross_entropy(c, pred, next, -100);
    return aux ? em_add(c, loss, em_mul_scalar(c, aux, cfg->router_aux_loss_coef)) : loss;
}

static em_tensor *batch_loss(em_ctx *c, em_trainer *t, const int64_t *w, int64_t b) {
    return em_trainer_loss(c, t, em_trainer_batch_ids(c, t, w, b));
}

/* Mixed precision: the gradient of each low-precision parameter becomes its f32 master's
 * (through the cast that makes one from the other, so the rule converts it). */
static em_status masters_grad(em_ctx *c, em_trainer *t) {
    for (int i = 0; i < t->np && !em_ctx_status(c); i++) {
        em_tensor *g = em_tensor_grad(t->tensors[i]);
        if (!g) continue;
        em_grad_enable(c, true);
        em_tensor *y = em_cast(c, t->master[i], em_tensor_dtype(t->tensors[i]));
        em_grad_enable(c, false);
        if (y) em_backward_grad(c, y, g);
        em_tensor_zero_grad(t->tensors[i]);
    }
    return em_ctx_status(c);
}

/*
 * Data parallel: each rank's gradients of its shard's mean loss, and that loss, averaged over
 * the group. The average of the ranks' means is the mean over the whole batch because the shards
 * are equal: each holds B / W windows, hence B / W (T - 1) predictions, none ignored (the labels
 * are the windows' own ids, never -100); so the averaged gradient is the gradient of the
 * single-process loss. Everything travels in one flat f32 buffer (one pair of collectives per
 * step rather than one per parameter), padded to a multiple of W. Reduce-scatter then
 * all-gather rather than an all-reduce: each element is summed once, on one rank, so every rank
 * gets the same bits (MPI_Allreduce does not promise that) and the replicas cannot drift apart.
 * A parameter this rank gave no gradient (an MoE expert no token of its shard reached) sends
 * zeros, since every rank must send the same shape.
 */
em_tensor *em_trainer_dp_average(em_ctx *c, em_trainer *t, em_tensor **grads, em_tensor *loss) {
    em_dist *g = t->o.group;
    int w = em_dist_world_size(g), n = t->np + 2;
    em_tensor **parts = malloc((size_t)n * sizeof *parts);
    if (!parts) return em_ctx_fail(c, EM_ERR_OOM, "trainer_step", "out of memory"), NULL;
    int64_t total = 0;
    for (int i = 0; i < t->np; i++) {
        em_tensor *p = t->trained[i], *gr = grads[i];
        int64_t k = em_tensor_numel(p);
        if (!gr) gr = em_zeros(c, EM_F32, em_tensor_ndim(p), em_tensor_shape(p));
        parts[i] = em_reshape(c, em_cast(c, gr, EM_F32), 1, &k);
        total += k;
    }
    parts[t->np] = em_reshape(c, em_cast(c, loss, EM_F32), 1, (int64_t[]){1});
    int64_t pad = (w - (total + 1) % w) % w;
    parts[t->np + 1] = em_zeros(c, EM_F32, 1, (int64_t[]){pad});
    em_tensor *flat = em_cat(c, parts, pad ? n : n - 1, 0);
    free(parts);
    em_tensor *sum = em_all_gather(c, em_reduce_scatter(c, flat, EM_REDUCE_SUM, 0, g), 0, g);
    em_tensor *avg = em_mul_scalar(c, sum, 1.0 / (double)w);
    int64_t off = 0;
    for (int i = 0; i < t->np && !em_ctx_status(c); i++) {
        em_tensor *p = t->trained[i];
        int64_t k = em_tensor_numel(p);
        grads[i] = em_reshape(c, em_slice(c, avg, 0, off, off + k, 1), em_tensor_ndim(p),
                              em_tensor_shape(p));
        off += k;
    }
    em_tensor *l = em_reshape(c, em_slice(c, avg, 0, total, total + 1, 1), 0, NULL);
    return em_ctx_status(c) ? NULL : l;
}

static em_status average_grads(em_ctx *c, em_trainer *t, em_tensor *loss, double *lv) {
    em_tensor **grads = malloc((size_t)(t->np ? t->np : 1) * sizeof *grads);
    if (!grads) return em_ctx_fail(c, EM_ERR_OOM, "trainer_step", "out of memory");
    em_scope_push(c);
    for (int i = 0; i < t->np; i++) grads[i] = em_tensor_grad(t->trained[i]);
    em_tensor *avg_loss = em_trainer_dp_average(c, t, grads, loss);
    for (int i = 0; avg_loss && i < t->np && !em_ctx_status(c); i++) {
        /* the leaf's gradient becomes the average (a backward from the leaf itself copies it) */
        em_tensor_zero_grad(t->trained[i]);
        em_backward_grad(c, t->trained[i], grads[i]);
    }
    if (avg_loss) em_item(c, avg_loss, lv);
    em_scope_pop(c);
    free(grads);
    return em_ctx_status(c);
}

/* The updated masters rounded into the model's weights. */
void em_trainer_masters_to_model(em_ctx *c, em_trainer *t) {
    for (int i = 0; i < t->np && !em_ctx_status(c); i++)
        em_assign(c, t->tensors[i], em_cast(c, t->master[i], em_tensor_dtype(t->tensors[i])));
}

static double schedule(const em_trainer *t, int64_t s) {
    if (t->o.schedule == EM_LR_COSINE)
        return em_lr_cosine_with_warmup(s, t->o.warmup, t->o.steps, 0.5);
    return em_lr_constant_with_warmup(s, t->o.warmup);
}

em_status em_trainer_step(em_ctx *c, em_trainer *t, em_train_step_info *info) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!t) return em_ctx_fail(c, EM_ERR_INVALID_ARG, "trainer_step", "NULL trainer");
    double t0 = now_s();
    int64_t s = t->step, B = t->o.batch;
    /* data parallel: this rank's share of the step's windows (its slice of the global
     * positions, so the shards together are exactly the windows of one process's step) */
    int w = t->o.group ? em_dist_world_size(t->o.group) : 1;
    int64_t bl = B / w, b0 = (t->o.group ? em_dist_rank(t->o.group) : 0) * bl;
    int64_t *wp = malloc((size_t)bl * sizeof *wp);
    if (!wp) return em_ctx_fail(c, EM_ERR_OOM, "trainer_step", "out of memory");
    for (int64_t b = 0; b < bl; b++) wp[b] = em_trainer_window(t, s * B + b0 + b);
    double lv = NAN, norm = NAN, lr = t->o.lr * schedule(t, s);
    if (t->o.compile) {
        em_status st = em_trainer_step_compiled(c, t, wp, bl, lr, &lv, &norm);
        free(wp);
        if (st) {
            if (em_ctx_error(c))
                em_ctx_fail(c, st, "trainer_step", "step %lld (compiled)", (long long)s);
            return st;
        }
        t->step++;
        if (info)
            *info = (em_train_step_info){.step = s, .loss = lv, .lr = lr, .grad_norm = norm,
                                         .tokens = B * t->o.seq_len, .seconds = now_s() - t0};
        return EM_OK;
    }
    em_scope_push(c);
    bool prev = em_grad_enable(c, true);
    em_tensor *loss = batch_loss(c, t, wp, bl);
    em_grad_enable(c, false);
    free(wp);
    if (loss && em_item(c, loss, &lv) == EM_OK && em_backward(c, loss) == EM_OK &&
        (!t->master || masters_grad(c, t) == EM_OK) &&
        (w == 1 || average_grads(c, t, loss, &lv) == EM_OK) &&
        em_clip_grad_norm(c, t->trained, t->np, t->o.grad_clip > 0 ? t->o.grad_clip : INFINITY,
                          &norm) == EM_OK) {
        em_optimizer_set_lr(t->opt, lr);
        if (em_optimizer_step(c, t->opt) == EM_OK && t->master) em_trainer_masters_to_model(c, t);
    }
    for (int i = 0; i < t->np; i++) em_tensor_zero_grad(t->tensors[i]);
    em_grad_tape_clear(c);
    em_optimizer_zero_grad(t->opt);
    em_scope_pop(c);
    em_grad_enable(c, prev);
    if (em_ctx_status(c)) {
        if (em_ctx_error(c))
            em_ctx_fail(c, em_ctx_status(c), "trainer_step", "step %lld", (long long)s);
        return em_ctx_status(c);
    }
    t->step++;
    if (info)
        *info = (em_train_step_info){.step = s, .loss = lv, .lr = lr, .grad_norm = norm,
                                     .tokens = B * t->o.seq_len, .seconds = now_s() - t0};
    return EM_OK;
}

em_status em_trainer_eval(em_ctx *c, em_trainer *t, double *val_loss) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!t || !val_loss || t->k_val < 1)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, "trainer_eval",
                           "no validation windows (set val_fraction)");
    bool prev = em_grad_enable(c, false);
    double sum = 0;
    int64_t B = t->o.batch;
    int64_t w[256] = {0};
    if (B > 256) B = 256;
    for (int64_t i0 = 0; i0 < t->k_val && !em_ctx_status(c); i0 += B) {
        int64_t b = t->k_val - i0 < B ? t->k_val - i0 : B;
        for (int64_t j = 0; j < b; j++) w[j] = t->k_train + i0 + j;
        em_scope_push(c);
        double lv = 0;
        if (em_item(c, batch_loss(c, t, w, b), &lv) == EM_OK) sum += lv * (double)b;
        em_scope_pop(c);
    }
    em_grad_enable(c, prev);
    *val_loss = sum / (double)t->k_val;
    return em_ctx_status(c);
}
