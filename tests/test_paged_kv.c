/* The paged KV cache (src/models/paged_kv.c) on the tiny checkpoints against transformers
 * (tests/fixtures/models/<family>_ref, scripts/gen_model_fixtures.py): prefill logits within
 * 1e-4, and greedy continuations token for token while rows of different lengths decode in one
 * batch, join and leave it, and one row reuses another's prompt blocks (whole blocks shared, the
 * partial last one copied); the block accounting
 * (blocks follow the lengths, shared blocks counted once, everything back in the pool when the
 * sequences end) and a full pool's error with nothing changed.
 *
 * EMBER_TEST_PAGED=compiled runs the decode steps through the compiled step
 * (em_paged_forward_compiled: the rows padded to a power of two, tables to 8-position buckets),
 * =xla the same on the XLA CPU plugin's device (skipped without it): the same tokens, and
 * compiles only when a (rows, table width) pair is first reached. */
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"
#include "models/paged_kv.h"

#define BS 4 /* small blocks: the tiny sequences cross several */

/* EMBER_TEST_PAGED: "compiled" or "xla" (see the top), else eager */
static const char *paged_mode(void) {
    const char *e = getenv("EMBER_TEST_PAGED");
    return e && (!strcmp(e, "compiled") || !strcmp(e, "xla")) ? e : NULL;
}

/* xla mode: the prefills run through the compiled step too (eagerly, every op of theirs would
 * compile a program of its own on the plugin) */
static em_paged_compiled *g_prefill_pc;

static em_tensor *fwd(em_ctx *c, const em_model *m, em_paged_kv *p, em_tensor *ids,
                      const int *seqs, const int64_t *n_new, bool last_only) {
    if (g_prefill_pc)
        return em_paged_forward_compiled(c, g_prefill_pc, ids, seqs, n_new, em_tensor_dim(ids, 0),
                                         last_only);
    return em_paged_forward(c, m, p, ids, seqs, n_new, last_only);
}

/* A decode step, eager or through pc (rows padded to a power of two). */
static em_tensor *decode(em_ctx *c, const em_model *m, em_paged_kv *p, em_paged_compiled *pc,
                         em_tensor *ids, const int *seqs) {
    if (!pc) return em_paged_forward(c, m, p, ids, seqs, NULL, true);
    int64_t rows = 1;
    while (rows < em_tensor_dim(ids, 0)) rows *= 2;
    return em_paged_forward_compiled(c, pc, ids, seqs, NULL, rows, true);
}

/* The greedy token of each row's last position of f32 logits [B, 1, V]. */
static void argmax_rows(em_ctx *c, em_tensor *lg, int64_t b, em_token *out) {
    int64_t v = em_tensor_dim(lg, 2);
    float *h = malloc((size_t)(b * v) * sizeof *h);
    if (!h || em_to_host(c, em_contiguous(c, lg), h, (size_t)(b * v) * sizeof *h) != EM_OK) {
        CHECK_MSG(false, "logits to host");
        free(h);
        return;
    }
    for (int64_t r = 0; r < b; r++) {
        int64_t best = 0;
        for (int64_t i = 1; i < v; i++)
            if (h[r * v + i] > h[r * v + best]) best = i;
        out[r] = (em_token)best;
    }
    free(h);
}

static em_tensor *ids_tensor(em_ctx *c, const em_token *ids, int64_t b, int64_t t) {
    int64_t *x = malloc((size_t)(b * t) * sizeof *x);
    for (int64_t i = 0; x && i < b * t; i++) x[i] = ids[i];
    em_tensor *r = x ? em_from_host_on(c, em_device_cpu(), EM_I64, 2, (int64_t[]){b, t}, x) : NULL;
    free(x);
    return r;
}

typedef struct row {
    const em_token *prompt, *want;
    int64_t n_prompt, n_want, got;
    int seq;
    em_token next, out[64];
} row;

/* Prefills a row alone (from `from`, the positions its sequence already holds) and takes its
 * first greedy token. */
static void prefill(em_ctx *c, const em_model *m, em_paged_kv *p, row *r, int64_t from) {
    em_scope_push(c);
    em_tensor *lg = fwd(c, m, p, ids_tensor(c, r->prompt + from, 1, r->n_prompt - from), &r->seq,
                        NULL, true);
    if (lg) argmax_rows(c, lg, 1, &r->next);
    em_scope_pop(c);
    r->out[r->got++] = r->next;
}

/* Prefills rows a and b together as the server does: one forward per chunk of up to `chunk`
 * tokens per row, a row with fewer left left-padded (n_new), each written at its own length. */
static void prefill_pair(em_ctx *c, const em_model *m, em_paged_kv *p, row *a, row *b,
                         int64_t chunk) {
    int64_t done[2] = {0, 0};
    row *rs[2] = {a, b};
    while (!em_ctx_status(c)) {
        int n = 0, seqs[2], at[2];
        int64_t k = 0, add[2];
        for (int i = 0; i < 2; i++) {
            int64_t left = rs[i]->n_prompt - done[i];
            if (!left) continue;
            add[n] = left < chunk ? left : chunk;
            if (add[n] > k) k = add[n];
            at[n] = i;
            seqs[n++] = rs[i]->seq;
        }
        if (!n) break;
        em_token ids[2 * 64];
        for (int j = 0; j < n; j++) {
            row *r = rs[at[j]];
            for (int64_t t = 0; t < k; t++) /* padding: any id (here the row's first) */
                ids[j * k + t] = t < k - add[j] ? r->prompt[0] : r->prompt[done[at[j]] + t - (k - add[j])];
        }
        em_scope_push(c);
        em_tensor *lg = fwd(c, m, p, ids_tensor(c, ids, n, k), seqs, add, true);
        em_token nx[2] = {0, 0};
        if (lg) argmax_rows(c, lg, n, nx);
        em_scope_pop(c);
        for (int j = 0; j < n; j++) {
            row *r = rs[at[j]];
            done[at[j]] += add[j];
            if (done[at[j]] == r->n_prompt) {
                r->next = nx[j];
                r->out[r->got++] = nx[j];
            }
        }
    }
}

/* Compile modes: a prefill chunk bucketed as the server's (`ember serve --compile`) is: two rows
 * (the fixture's prompt and its first plen - 3 tokens) padded to 4 rows, their columns
 * left-padded to the next power of two (n_new), through a program of its own. The last real
 * token's logits of each row equal transformers' at that position (causal: the prefix's last
 * logits are the whole prompt's at that position) and the eager forward's of the same padded
 * input. The sequences are freed again. */
static void check_bucketed_prefill(em_ctx *c, const em_model *m, em_paged_kv *p,
                                   const em_token *ids, int64_t plen, em_tensor *ref,
                                   const char *family) {
    if (plen < 5 || !ref) return;
    int64_t kb = 1, n_new[2] = {plen, plen - 3};
    while (kb < plen) kb *= 2;
    kb *= 2; /* a bucket wider than either row: both padded */
    em_token x[2 * 64];
    if (kb > 64) {
        CHECK_MSG(false, "%s: a prompt of %lld tokens is too long for this check", family,
                  (long long)plen);
        return;
    }
    for (int r = 0; r < 2; r++)
        for (int64_t t = 0; t < kb; t++) /* padding: id 0 (the server's) */
            x[r * kb + t] = t < kb - n_new[r] ? 0 : ids[t - (kb - n_new[r])];
    em_paged_compiled *pf = em_paged_compile(c, m, p, 8, 64);
    em_tensor *lg[2] = {NULL, NULL};
    int seqs[2][2];
    em_scope_push(c);
    for (int k = 0; k < 2 && pf; k++) { /* k = 0: compiled, 1: eager */
        seqs[k][0] = em_paged_seq_new(c, p);
        seqs[k][1] = em_paged_seq_new(c, p);
        em_tensor *it = ids_tensor(c, x, 2, kb);
        lg[k] = k ? em_paged_forward(c, m, p, it, seqs[k], n_new, true)
                  : em_paged_forward_compiled(c, pf, it, seqs[k], n_new, 4, true);
    }
    CHECK_MSG(lg[0] && lg[1], "%s bucketed prefill: %s", family,
              em_ctx_error(c) ? em_ctx_error(c)->message : "");
    for (int r = 0; r < 2 && lg[0] && lg[1]; r++) {
        em_tensor *want = em_narrow(c, em_narrow(c, ref, 0, 0, 1), 1, n_new[r] - 1, 1);
        em_tensor *got = em_narrow(c, lg[0], 0, r, 1);
        em_test_allclose(c, got, want, 1e-4, 1e-4, "bucketed compiled prefill vs transformers");
        em_test_allclose(c, got, em_narrow(c, lg[1], 0, r, 1), 1e-5, 1e-5,
                         "bucketed compiled prefill vs eager");
    }
    em_scope_pop(c);
    em_compile_stats st;
    em_paged_compiled_stats(pf, &st);
    CHECK_MSG(!pf || st.compiles == 1, "%s bucketed prefill: %lld compiles", family,
              (long long)st.compiles);
    for (int k = 0; k < 2 && pf; k++) {
        em_paged_seq_free(p, seqs[k][0]);
        em_paged_seq_free(p, seqs[k][1]);
    }
    em_paged_compiled_free(pf);
}

static void check_family(const char *family) {
    char rel[128];
    snprintf(rel, sizeof rel, "models/%s_ref", family);
    em_test_bundle *b = em_test_bundle_load(rel);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_model_options o = em_model_default_options();
    o.dtype = EM_F32;
    const char *mode = paged_mode();
    if (mode && !strcmp(mode, "xla")) {
        /* one family: every eager op of the prefills compiles a program of its own on the
         * plugin (seconds each cold), which the CI's time does not allow four times */
        if (strcmp(family, "qwen3")) {
            em_test_skip("%s: EMBER_TEST_PAGED=xla runs qwen3 only", family);
            em_ctx_free(c);
            em_test_bundle_free(b);
            return;
        }
        if (!em_test_xla_or_skip(c)) {
            em_ctx_free(c);
            em_test_bundle_free(b);
            return;
        }
        o.device = "xla:0";
    }
    em_model *m = em_test_load_fixture_model(c, family, &o);
    int64_t n_ids, n_want, nb, nm, ng;
    em_token *ids = em_test_host_tokens(c, em_test_bundle_get(b, c, "ids"), &n_ids);
    em_token *want = em_test_host_tokens(c, em_test_bundle_get(b, c, "greedy"), &n_want);
    em_token *bids = em_test_host_tokens(c, em_test_bundle_get(b, c, "batch_ids"), &nb);
    em_token *bmask = em_test_host_tokens(c, em_test_bundle_get(b, c, "batch_mask"), &nm);
    em_token *bwant = em_test_host_tokens(c, em_test_bundle_get(b, c, "batch_greedy"), &ng);
    em_paged_kv *p = m ? em_paged_kv_create(c, m, 64, BS, 8) : NULL;
    em_paged_compiled *pc = p && mode ? em_paged_compile(c, m, p, 8, 64) : NULL;
    CHECK_MSG(p != NULL && (!mode || pc), "%s: %s", family,
              em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (!p || (mode && !pc) || !ids || !want || !bids || !bmask || !bwant) goto done;
    int64_t pairs[32], n_pairs = 0; /* (rows, table bucket) pairs the decode steps reached */
    int64_t decode_compiles = 0, decode_calls = 0;
    g_prefill_pc = !strcmp(mode ? mode : "", "xla") ? pc : NULL;

    /* rows: the fixture's prompt, the two prompts of its left-padded batch (unpadded), and the
     * first prompt again on a sequence that shares the first one's full blocks */
    row rows[4];
    memset(rows, 0, sizeof rows);
    int64_t plen = n_ids / 2, width = nb / 2;
    rows[0] = (row){ids, want, plen, n_want, 0, -1, 0, {0}};
    for (int k = 0; k < 2; k++) {
        int64_t len = 0;
        for (int64_t j = 0; j < width; j++) len += bmask[k * width + j];
        rows[1 + k] = (row){bids + k * width + (width - len), bwant + k * (ng / 2), len, ng / 2,
                            0, -1, 0, {0}};
    }
    rows[3] = rows[0];
    rows[3].n_want = 5; /* leaves the batch early */

    /* prefill logits of the first prompt against transformers' */
    rows[0].seq = em_paged_seq_new(c, p);
    em_scope_push(c);
    em_tensor *lg = fwd(c, m, p, ids_tensor(c, ids, 1, plen), &rows[0].seq, NULL, false);
    em_tensor *ref = em_test_bundle_get(b, c, "logits_f32");
    if (lg && ref)
        em_test_allclose(c, lg, em_narrow(c, ref, 0, 0, 1), 1e-4, 1e-4, "paged prefill logits");
    CHECK_MSG(lg != NULL, "%s prefill: %s", family, em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (lg) argmax_rows(c, em_narrow(c, lg, 1, plen - 1, 1), 1, &rows[0].next);
    em_scope_pop(c);
    rows[0].out[rows[0].got++] = rows[0].next;
    if (mode) {
        em_scope_push(c);
        check_bucketed_prefill(c, m, p, ids, plen, em_test_bundle_get(b, c, "logits_f32"), family);
        em_scope_pop(c);
    }
    CHECK(em_paged_kv_blocks_used(p) == em_paged_kv_blocks_for(p, plen));
    /* row 3 reuses row 0's whole blocks of its first plen - 1 positions, computes the rest */
    rows[3].seq = em_paged_seq_new(c, p);
    int64_t used0 = em_paged_kv_blocks_used(p);
    int64_t shared = em_paged_seq_share(c, p, rows[3].seq, rows[0].seq, plen - 1);
    CHECK_MSG(shared == plen - 1, "shared %lld positions", (long long)shared);
    prefill(c, m, p, &rows[3], shared);
    CHECK_MSG(em_paged_kv_blocks_used(p) ==
                  used0 + em_paged_kv_blocks_for(p, plen) - (plen - 1) / BS,
              "shared blocks are counted once");
    /* rows 1 and 2 join later, prefilled together, while the others decode */
    int n_active = 2;
    int active[4] = {0, 3, -1, -1};
    for (int step = 0; step < 40 && !em_ctx_status(c); step++) {
        if (step == 2) { /* prefilled together, in chunks of 5 (the shorter one padded) */
            rows[1].seq = em_paged_seq_new(c, p);
            rows[2].seq = em_paged_seq_new(c, p);
            prefill_pair(c, m, p, &rows[1], &rows[2], 5);
            active[n_active++] = 1;
            active[n_active++] = 2;
        }
        /* rows that are done leave (their blocks go back to the pool) */
        for (int i = 0; i < n_active;) {
            row *r = &rows[active[i]];
            if (r->got >= r->n_want) {
                em_paged_seq_free(p, r->seq);
                active[i] = active[--n_active];
            } else {
                i++;
            }
        }
        if (!n_active) break;
        int64_t need = 0;
        for (int i = 0; i < 4; i++)
            if (rows[i].seq >= 0 && rows[i].got < rows[i].n_want)
                need += em_paged_kv_blocks_for(p, em_paged_seq_len(p, rows[i].seq));
        int64_t sharing = rows[0].got < rows[0].n_want && rows[3].got < rows[3].n_want;
        CHECK_MSG(em_paged_kv_blocks_used(p) == need - sharing * ((plen - 1) / BS),
                  "step %d: %lld blocks used, the lengths need %lld", step,
                  (long long)em_paged_kv_blocks_used(p), (long long)need);
        em_token in[4];
        int seqs[4];
        for (int i = 0; i < n_active; i++) {
            in[i] = rows[active[i]].next;
            seqs[i] = rows[active[i]].seq;
        }
        em_scope_push(c);
        if (pc) { /* the pair this step runs: rows padded to a power of two, the longest
                   * row's blocks to 2-block buckets */
            int64_t n_rows = 1, mb = 1;
            while (n_rows < n_active) n_rows *= 2;
            for (int i = 0; i < n_active; i++) {
                int64_t nbk = em_paged_kv_blocks_for(p, em_paged_seq_len(p, seqs[i]) + 1);
                if (nbk > mb) mb = nbk;
            }
            int64_t key = n_rows * 1000 + (mb + 1) / 2, k = 0;
            while (k < n_pairs && pairs[k] != key) k++;
            if (k == n_pairs && n_pairs < 32) pairs[n_pairs++] = key;
        }
        em_compile_stats s0, s1;
        em_paged_compiled_stats(pc, &s0);
        em_tensor *l = decode(c, m, p, pc, ids_tensor(c, in, n_active, 1), seqs);
        em_paged_compiled_stats(pc, &s1);
        decode_compiles += s1.compiles - s0.compiles;
        decode_calls += s1.calls - s0.calls;
        em_token nx[4] = {0};
        if (l) argmax_rows(c, l, n_active, nx);
        em_scope_pop(c);
        for (int i = 0; i < n_active; i++) {
            row *r = &rows[active[i]];
            r->next = nx[i];
            r->out[r->got++] = nx[i];
        }
    }
    CHECK_MSG(!em_ctx_status(c), "%s decode: %s", family, em_ctx_error(c)->message);
    em_ctx_clear_error(c);
    for (int k = 0; k < 4; k++)
        CHECK_MSG(rows[k].got == rows[k].n_want &&
                      !memcmp(rows[k].out, rows[k].want, (size_t)rows[k].n_want * sizeof(em_token)),
                  "%s row %d: paged greedy tokens differ from transformers", family, k);
    CHECK_MSG(em_paged_kv_blocks_used(p) == 0, "%lld blocks leaked",
              (long long)em_paged_kv_blocks_used(p));
    if (pc) { /* decode: one compile per pair reached, none per step */
        em_compile_stats st;
        em_paged_compiled_stats(pc, &st);
        CHECK_MSG(decode_compiles == n_pairs && decode_calls > n_pairs,
                  "%s: %lld compiles, %lld calls for %lld (rows, table) pairs (%s)", family,
                  (long long)decode_compiles, (long long)decode_calls, (long long)n_pairs,
                  st.backend);
    }
done:
    g_prefill_pc = NULL;
    em_paged_compiled_free(pc);
    em_paged_kv_free(p);
    free(ids);
    free(want);
    free(bids);
    free(bmask);
    free(bwant);
    em_model_free(m);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

static void test_qwen3(void) { check_family("qwen3"); }
static void test_llama(void) { check_family("llama"); }
static void test_qwen3_moe(void) { check_family("qwen3_moe"); }
/* KV sharing (the last layers read an earlier layer's blocks), sliding layers, per-layer inputs */
static void test_gemma4_text(void) { check_family("gemma4_text"); }

/* A pool too small for a step: the step fails naming the pool, lengths and blocks unchanged;
 * bad sequence ids and shares are refused. */
static void test_errors(void) {
    em_ctx *c = em_ctx_create();
    em_model *m = em_test_load_fixture_model(c, "qwen3", NULL);
    em_paged_kv *p = m ? em_paged_kv_create(c, m, 2, BS, 2) : NULL;
    CHECK(p != NULL);
    if (p) {
        int s = em_paged_seq_new(c, p);
        em_token ids[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
        em_scope_push(c);
        em_tensor *lg = em_paged_forward(c, m, p, ids_tensor(c, ids, 1, 12), &s, NULL, true);
        em_scope_pop(c);
        CHECK(lg == NULL && em_ctx_status(c) == EM_ERR_OOM &&
              strstr(em_ctx_error(c)->message, "KV pool has 2 free blocks"));
        em_ctx_clear_error(c);
        CHECK(em_paged_seq_len(p, s) == 0 && em_paged_kv_blocks_used(p) == 0);
        em_scope_push(c);
        lg = em_paged_forward(c, m, p, ids_tensor(c, ids, 1, 8), &s, NULL, true);
        em_scope_pop(c);
        CHECK(lg != NULL && em_paged_seq_len(p, s) == 8 && em_paged_kv_blocks_used(p) == 2);
        int t = em_paged_seq_new(c, p);
        CHECK(em_paged_seq_new(c, p) == -1 && em_ctx_status(c) == EM_ERR_INVALID_ARG);
        em_ctx_clear_error(c);
        CHECK(em_paged_seq_share(c, p, s, t, 4) == -1); /* the target is not empty */
        em_ctx_clear_error(c);
        int bad = 7;
        em_scope_push(c);
        CHECK(em_paged_forward(c, m, p, ids_tensor(c, ids, 1, 1), &bad, NULL, true) == NULL &&
              strstr(em_ctx_error(c)->message, "sequence 7"));
        em_scope_pop(c);
        em_ctx_clear_error(c);
        CHECK(em_paged_seq_share(c, p, t, s, 8) == 8 && em_paged_kv_blocks_used(p) == 2);
        em_paged_seq_free(p, s);
        CHECK(em_paged_kv_blocks_used(p) == 2); /* t still holds them */
        em_paged_seq_free(p, t);
        CHECK(em_paged_kv_blocks_used(p) == 0);
    }
    em_paged_kv_free(p);
    em_model_free(m);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_qwen3), T(test_llama), T(test_qwen3_moe), T(test_gemma4_text), T(test_errors))
