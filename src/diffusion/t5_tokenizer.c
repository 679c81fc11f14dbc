/* The T5 tokenizer of Stable Diffusion 3 folders (tokenizer_3/: a tokenizers Unigram
 * tokenizer.json and its tokenizer_config.json), called as diffusers' _get_t5_prompt_embeds
 * calls it: padding to max_length, truncation, the eos token the post-processor appends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ember/t5.h"
#include "ember/tensor.h"

#define OP "T5Tokenizer"

struct em_t5_tokenizer {
    em_tokenizer *tok;
    em_token eos, pad;
};

em_t5_tokenizer *em_t5_tokenizer_load(em_ctx *c, const char *dir) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!dir || !*dir) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "the folder is NULL or empty");
        return NULL;
    }
    struct stat sb;
    size_t n = strlen(dir) + 32;
    char *tj = malloc(n);
    em_t5_tokenizer *t = calloc(1, sizeof *t);
    if (!tj || !t) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        goto fail;
    }
    snprintf(tj, n, "%s/tokenizer.json", dir);
    if (stat(tj, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        em_ctx_fail(c, EM_ERR_NOT_FOUND, OP, "%s holds no tokenizer.json (Ember reads the fast "
                    "tokenizer's file; a spiece.model alone is not read)", dir);
        goto fail;
    }
    if (!(t->tok = em_tokenizer_load(c, tj))) goto fail;
    const char *eos = em_tokenizer_special_token(t->tok, EM_SPECIAL_EOS);
    const char *pad = em_tokenizer_special_token(t->tok, EM_SPECIAL_PAD);
    /* T5Tokenizer's defaults when tokenizer_config.json names none */
    t->eos = em_tokenizer_token_to_id(t->tok, eos ? eos : "</s>", strlen(eos ? eos : "</s>"));
    t->pad = em_tokenizer_token_to_id(t->tok, pad ? pad : "<pad>", strlen(pad ? pad : "<pad>"));
    if (t->eos < 0 || t->pad < 0) {
        em_ctx_fail(c, EM_ERR_NOT_FOUND, OP, "%s '%s' is not in the vocabulary of %s",
                    t->eos < 0 ? "eos_token" : "pad_token",
                    t->eos < 0 ? (eos ? eos : "</s>") : (pad ? pad : "<pad>"), dir);
        goto fail;
    }
    /* the post-processor must append eos alone: "" with special tokens is [eos] */
    em_token *ids = NULL;
    size_t k = 0;
    if (em_tokenizer_encode(c, t->tok, "", 0, true, &ids, &k)) goto fail;
    bool ok = k == 1 && ids[0] == t->eos;
    em_free(ids);
    if (!ok) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, OP, "%s: the post-processor adds %zu special tokens "
                    "to an empty text, not the eos token alone (T5's \"$A </s>\")", tj, k);
        goto fail;
    }
    free(tj);
    return t;
fail:
    free(tj);
    em_t5_tokenizer_free(t);
    return NULL;
}

void em_t5_tokenizer_free(em_t5_tokenizer *t) {
    if (!t) return;
    em_tokenizer_free(t->tok);
    free(t);
}

const em_tokenizer *em_t5_tokenizer_base(const em_t5_tokenizer *t) { return t ? t->tok : NULL; }

/* One prompt into row[0..L) and mrow: tokens cut to L - 1 (truncation before the
 * post-processor, as tokenizers does), eos, pads. */
static bool one(em_ctx *c, const em_t5_tokenizer *t, const char *p, int64_t L, int64_t *row,
                int64_t *mrow) {
    em_token *body = NULL;
    size_t n = 0;
    if (em_tokenizer_encode(c, t->tok, p, strlen(p), false, &body, &n)) return false;
    int64_t keep = (int64_t)n < L - 1 ? (int64_t)n : L - 1;
    for (int64_t i = 0; i < L; i++) {
        row[i] = i < keep ? body[i] : i == keep ? t->eos : t->pad;
        mrow[i] = i <= keep;
    }
    em_free(body);
    return true;
}

em_tensor *em_t5_tokenize_batch(em_ctx *c, const em_t5_tokenizer *t, const char *const *prompts,
                                int n, int64_t max_length, em_tensor **mask) {
    if (mask) *mask = NULL;
    if (!c || em_ctx_status(c)) return NULL;
    if (!t || !prompts || n < 1) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "needs a tokenizer and at least one prompt");
        return NULL;
    }
    if (max_length < 1 || max_length > ((int64_t)1 << 24)) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "max_length %lld: expected 1 to 2^24",
                    (long long)max_length);
        return NULL;
    }
    size_t total = (size_t)n * (size_t)max_length;
    int64_t *ids = malloc(total * sizeof *ids), *m = malloc(total * sizeof *m);
    em_tensor *r = NULL;
    if (!ids || !m) em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    for (int i = 0; i < n && !em_ctx_status(c); i++) {
        if (!prompts[i]) {
            em_ctx_fail(c, EM_ERR_INVALID_ARG, OP, "prompt %d is NULL", i);
            break;
        }
        size_t at = (size_t)i * (size_t)max_length;
        one(c, t, prompts[i], max_length, ids + at, m + at);
    }
    if (!em_ctx_status(c)) {
        int64_t shape[2] = {n, max_length};
        r = em_from_host(c, EM_I64, 2, shape, ids);
        if (mask && r) *mask = em_from_host(c, EM_I64, 2, shape, m);
        if (em_ctx_status(c)) {
            r = NULL;
            if (mask) *mask = NULL;
        }
    }
    free(ids);
    free(m);
    return r;
}
