/*
 * Checkpoints of a trainer (ember/train.h): a Hub-layout folder that transformers'
 * from_pretrained reads (model.safetensors: the parameters and the saved buffers, such as Gemma
 * 4's layer_scalar, under the Hub's names in the model's dtype with "format": "pt" metadata,
 * config.json, generation_config.json, tokenizer files) plus trainer_state.safetensors, the
 * state a resumed run needs to continue bit-identically (AdamW moments, step counts; the data
 * order is a function of the seed and the step).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ember/safetensors.h"
#include "core/make_dirs.h"
#include "train/trainer_impl.h"

#define STATE_FILE "trainer_state.safetensors"
#define STATE_FORMAT "ember-trainer-state-1"

/* Copies src to dst (skipped when they are the same file); a missing src is not an error
 * unless required. */
static em_status copy_file(em_ctx *c, const char *src, const char *dst, bool required) {
    char a[PATH_MAX], b[PATH_MAX];
    if (realpath(src, a) && realpath(dst, b) && !strcmp(a, b)) return EM_OK;
    FILE *in = fopen(src, "rb");
    if (!in)
        return required ? em_ctx_fail(c, EM_ERR_IO, "trainer_save", "cannot read %s", src)
                        : EM_OK;
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", dst);
    FILE *out = fopen(tmp, "wb");
    if (!out) {
        fclose(in);
        return em_ctx_fail(c, EM_ERR_IO, "trainer_save", "cannot write %s: %s", tmp,
                           strerror(errno));
    }
    char buf[1 << 16];
    size_t n;
    bool ok = true;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    fclose(in);
    ok = (fclose(out) == 0) && ok;
    if (!ok || rename(tmp, dst) != 0) {
        remove(tmp);
        return em_ctx_fail(c, EM_ERR_IO, "trainer_save", "cannot write %s", dst);
    }
    return EM_OK;
}

static em_status write_generation_config(em_ctx *c, em_trainer *t, const char *path) {
    const em_generation_config *g = em_model_generation_config(t->m);
    FILE *f = fopen(path, "w");
    if (!f) return em_ctx_fail(c, EM_ERR_IO, "trainer_save", "cannot write %s", path);
    fprintf(f, "{\n");
    if (g->bos_token_id >= 0) fprintf(f, "  \"bos_token_id\": %lld,\n", (long long)g->bos_token_id);
    if (g->pad_token_id >= 0) fprintf(f, "  \"pad_token_id\": %lld,\n", (long long)g->pad_token_id);
    if (g->n_eos_token_ids > 0) {
        fprintf(f, "  \"eos_token_id\": [");
        for (int i = 0; i < g->n_eos_token_ids; i++)
            fprintf(f, "%s%lld", i ? ", " : "", (long long)g->eos_token_ids[i]);
        fprintf(f, "],\n");
    }
    fprintf(f, "  \"transformers_version\": \"5.24.0\"\n}\n");
    return fclose(f) == 0 ? EM_OK
                          : em_ctx_fail(c, EM_ERR_IO, "trainer_save", "cannot write %s", path);
}

static const char *const TOKENIZER_FILES[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt", "tokenizer.model", "added_tokens.json", "chat_template.jinja", NULL};

static em_status save_state(em_ctx *c, em_trainer *t, const char *path) {
    em_safetensors_writer *w = em_safetensors_writer_create(c);
    if (!w) return em_ctx_status(c);
    int64_t *steps = calloc((size_t)(t->np ? t->np : 1), sizeof *steps);
    if (!steps) {
        em_safetensors_writer_free(w);
        return em_ctx_fail(c, EM_ERR_OOM, "trainer_save", "out of memory");
    }
    for (int i = 0; i < t->np && !em_ctx_status(c); i++) {
        em_tensor *m = NULL, *v = NULL;
        em_optimizer_state(t->opt, i, &m, &v, &steps[i]);
        char key[200];
        if (m) {
            snprintf(key, sizeof key, "exp_avg.%s", t->params[i].name);
            em_safetensors_writer_add(c, w, key, m);
        }
        if (v) {
            snprintf(key, sizeof key, "exp_avg_sq.%s", t->params[i].name);
            em_safetensors_writer_add(c, w, key, v);
        }
        if (t->master) {
            snprintf(key, sizeof key, "master.%s", t->params[i].name);
            em_safetensors_writer_add(c, w, key, t->master[i]);
        }
    }
    int64_t shape[1] = {t->np};
    em_safetensors_writer_add_raw(c, w, "param_steps", EM_ST_I64, 1, shape, steps,
                                  (size_t)t->np * sizeof *steps);
    char val[64];
#define META(k, ...)                                                                               \
    do {                                                                                           \
        snprintf(val, sizeof val, __VA_ARGS__);                                                    \
        em_safetensors_writer_set_metadata(c, w, k, val);                                          \
    } while (0)
    META("format", "%s", STATE_FORMAT);
    META("step", "%lld", (long long)t->step);
    META("seq_len", "%lld", (long long)t->o.seq_len);
    META("batch", "%lld", (long long)t->o.batch);
    META("shuffle", "%d", (int)t->o.shuffle);
    META("seed", "%llu", (unsigned long long)t->o.seed);
    META("val_fraction", "%.17g", t->o.val_fraction);
    META("steps", "%lld", (long long)t->o.steps);
    META("lr", "%.17g", t->o.lr);
    META("schedule", "%s", em_lr_schedule_name(t->o.schedule));
    META("warmup", "%lld", (long long)t->o.warmup);
#undef META
    if (!em_ctx_status(c)) em_safetensors_writer_save(c, w, path);
    em_safetensors_writer_free(w);
    free(steps);
    return em_ctx_status(c);
}

em_status em_trainer_save(em_ctx *c, em_trainer *t, const char *dir) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!t || !dir) return em_ctx_fail(c, EM_ERR_INVALID_ARG, "trainer_save", "NULL argument");
    if (em_make_dirs(c, "trainer_save", dir)) return em_ctx_status(c);
    const char *src = em_model_dir(t->m);
    char a[PATH_MAX + 64], b[PATH_MAX + 64];
    /* the weights: Hub names, the model's dtype, transformers' "format" metadata */
    em_safetensors_writer *w = em_safetensors_writer_create(c);
    for (int i = 0; w && i < t->np && !em_ctx_status(c); i++)
        em_safetensors_writer_add(c, w, t->params[i].name, t->params[i].tensor);
    /* the saved buffers (frozen), as transformers' save_pretrained writes them */
    for (int i = 0; w && i < t->nb && !em_ctx_status(c); i++)
        em_safetensors_writer_add(c, w, t->buffers[i].name, t->buffers[i].tensor);
    if (w) em_safetensors_writer_set_metadata(c, w, "format", "pt");
    snprintf(b, sizeof b, "%s/model.safetensors", dir);
    if (w && !em_ctx_status(c)) em_safetensors_writer_save(c, w, b);
    em_safetensors_writer_free(w);
    if (em_ctx_status(c)) return em_ctx_status(c);
    snprintf(a, sizeof a, "%s/config.json", src);
    snprintf(b, sizeof b, "%s/config.json", dir);
    if (copy_file(c, a, b, true)) return em_ctx_status(c);
    snprintf(a, sizeof a, "%s/generation_config.json", src);
    snprintf(b, sizeof b, "%s/generation_config.json", dir);
    struct stat sb;
    if (stat(a, &sb) == 0 ? copy_file(c, a, b, true) : write_generation_config(c, t, b))
        return em_ctx_status(c);
    for (int i = 0; TOKENIZER_FILES[i]; i++) {
        snprintf(a, sizeof a, "%s/%s", src, TOKENIZER_FILES[i]);
        snprintf(b, sizeof b, "%s/%s", dir, TOKENIZER_FILES[i]);
        if (copy_file(c, a, b, false)) return em_ctx_status(c);
    }
    snprintf(b, sizeof b, "%s/" STATE_FILE, dir);
    return save_state(c, t, b);
}

static bool meta_is(em_ctx *c, const em_safetensors *st, const char *path, const char *key,
                    const char *want) {
    const char *got = em_safetensors_metadata_get(st, key);
    if (got && !strcmp(got, want)) return true;
    em_ctx_fail(c, EM_ERR_INVALID_ARG, "trainer_resume",
                "%s: the saved run has %s %s, this one %s: resuming needs the same %s", path, key,
                got ? got : "(missing)", want, key);
    return false;
}

em_status em_trainer_resume(em_ctx *c, em_trainer *t, const char *dir) {
    if (!c) return EM_ERR_INVALID_ARG;
    if (em_ctx_status(c)) return em_ctx_status(c);
    if (!t || !dir) return em_ctx_fail(c, EM_ERR_INVALID_ARG, "trainer_resume", "NULL argument");
    char path[PATH_MAX + 64], v[64];
    snprintf(path, sizeof path, "%s/" STATE_FILE, dir);
    em_safetensors *st = em_safetensors_open(c, path);
    if (!st) return em_ctx_status(c);
    const char *step = NULL;
    bool ok = meta_is(c, st, path, "format", STATE_FORMAT);
#define SAME(k, ...) (snprintf(v, sizeof v, __VA_ARGS__), ok = ok && meta_is(c, st, path, k, v))
    SAME("seq_len", "%lld", (long long)t->o.seq_len);
    SAME("batch", "%lld", (long long)t->o.batch);
    SAME("shuffle", "%d", (int)t->o.shuffle);
    SAME("seed", "%llu", (unsigned long long)t->o.seed);
    SAME("val_fraction", "%.17g", t->o.val_fraction);
#undef SAME
    char *end = NULL;
    long long s = -1;
    if (ok) {
        step = em_safetensors_metadata_get(st, "step");
        s = step ? strtoll(step, &end, 10) : -1;
        if (!step || *end || s < 0) {
            em_ctx_fail(c, EM_ERR_FORMAT, "trainer_resume", "%s: bad step '%s'", path,
                        step ? step : "(missing)");
            ok = false;
        }
    }
    size_t nb = 0;
    const int64_t *steps = ok ? em_safetensors_data(c, st, "param_steps", &nb) : NULL;
    if (ok && (!steps || nb != (size_t)t->np * sizeof *steps)) {
        if (!em_ctx_status(c))
            em_ctx_fail(c, EM_ERR_FORMAT, "trainer_resume",
                        "%s: param_steps holds %zu bytes for %d parameters", path, nb, t->np);
        ok = false;
    }
    for (int i = 0; ok && i < t->np && !em_ctx_status(c); i++) {
        char km[200], kv[200];
        snprintf(km, sizeof km, "exp_avg.%s", t->params[i].name);
        snprintf(kv, sizeof kv, "exp_avg_sq.%s", t->params[i].name);
        bool hm = em_safetensors_has(st, km), hv = em_safetensors_has(st, kv);
        em_scope_push(c);
        em_tensor *m = hm ? em_safetensors_load(c, st, km, em_tensor_device(t->params[i].tensor))
                          : NULL;
        em_tensor *vv = hv ? em_safetensors_load(c, st, kv, em_tensor_device(t->params[i].tensor))
                           : NULL;
        int64_t ps;
        memcpy(&ps, steps + i, sizeof ps);
        em_optimizer_set_state(c, t->opt, i, m, vv, ps);
        if (t->master && !em_ctx_status(c)) { /* the f32 masters, exactly */
            char kw[200];
            snprintf(kw, sizeof kw, "master.%s", t->params[i].name);
            em_tensor *mw = em_safetensors_load_as(c, st, kw, EM_F32,
                                                   em_tensor_device(t->master[i]));
            if (mw) em_assign(c, t->master[i], mw);
        }
        em_scope_pop(c);
        if (em_ctx_status(c))
            em_ctx_fail(c, em_ctx_status(c), "trainer_resume", "%s: parameter %s", path,
                        t->params[i].name);
    }
    em_safetensors_free(st);
    if (!ok || em_ctx_status(c)) return em_ctx_status(c) ? em_ctx_status(c) : EM_ERR_INVALID_ARG;
    if (t->master) {
        em_trainer_masters_to_model(c, t);
        if (em_ctx_status(c)) return em_ctx_status(c);
    }
    t->step = s;
    em_optimizer_set_steps(t->opt, s);
    /* the moments are new tensors: a compiled step captured the old ones, trace again */
    em_compiled_free(t->cstep);
    t->cstep = NULL;
    return EM_OK;
}
