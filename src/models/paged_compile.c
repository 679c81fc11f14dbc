/*
 * Compile mode for the paged KV cache (paged_kv.h): em_paged_forward's step as a compiled
 * function. What changes from step to step is data: the ids, positions, the slots the step
 * writes, the rows' block tables and lengths are the program's inputs; the pools are captured
 * (written in place by the program, read by em_paged_attention through the tables). The shapes
 * are (rows, tokens per row, table width): the caller pads the rows to its batch bucket and the
 * table width is rounded up to a bucket of positions, so a running batch reuses its program
 * while requests join, leave and grow (one program per (rows, width) pair it reaches).
 */
#include <stdlib.h>

#include "core/tensor_impl.h"
#include "models/decoder_blocks.h"
#include "models/paged_kv.h"

struct em_paged_compiled {
    const em_model *m;
    em_paged_kv *p;
    int64_t bucket_blocks, max_blocks;
    em_compiled *fn;
    const em_paged_step *cur; /* the step being traced (its shapes) */
};

/* in: ids [R, T], positions [R, T], slots [R*T], table [R, MB], lens [R]; statics: last_only */
static int step_fn(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                   int n_statics, em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)n_statics, (void)max_out;
    em_paged_compiled *pc = user;
    em_fwd f;
    em_paged_fwd_init(&f, c, pc->m, pc->p, pc->cur);
    f.stat = true; /* symbolic inputs: MoE routing stays on the device, no host reads */
    f.positions = in[1];
    f.pg_slots = in[2];
    f.pg_table = in[3];
    f.pg_lens = in[4];
    out[0] = em_decoder_forward_body(&f, in[0], statics[0] != 0);
    return out[0] ? 1 : -1;
}

em_paged_compiled *em_paged_compile(em_ctx *c, const em_model *m, em_paged_kv *p, int64_t bucket,
                                    int64_t max_len) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!em_model_compile_supported(m) || !em_paged_kv_supported(m) || !p) {
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "paged_compile",
                    "compile mode with the paged cache needs a decoder with the shared forward "
                    "wholly on one device and its paged cache%s%s",
                    m ? "; model_type " : "", m ? m->cfg.model_type : "");
        return NULL;
    }
    em_paged_compiled *pc = calloc(1, sizeof *pc);
    if (!pc) {
        em_ctx_fail(c, EM_ERR_OOM, "paged_compile", "out of memory");
        return NULL;
    }
    int64_t bs = em_paged_kv_block_size(p);
    pc->m = m;
    pc->p = p;
    pc->bucket_blocks = ((bucket > 0 ? bucket : 128) + bs - 1) / bs;
    pc->max_blocks = max_len > 0 ? (max_len + bs - 1) / bs : 0;
    pc->fn = em_compile(c, m->cfg.model_type, step_fn, pc);
    if (!pc->fn) {
        free(pc);
        return NULL;
    }
    return pc;
}

void em_paged_compiled_free(em_paged_compiled *pc) {
    if (!pc) return;
    em_compiled_free(pc->fn);
    free(pc);
}

void em_paged_compiled_stats(const em_paged_compiled *pc, em_compile_stats *out) {
    em_compiled_stats(pc ? pc->fn : NULL, out);
}

em_tensor *em_paged_forward_compiled(em_ctx *c, em_paged_compiled *pc, em_tensor *ids,
                                     const int *seqs, const int64_t *n_new, int64_t rows,
                                     bool last_only) {
    if (!c || em_ctx_status(c)) return NULL;
    if (!pc) {
        em_ctx_fail(c, EM_ERR_INVALID_ARG, "paged_forward_compiled", "no compiled step");
        return NULL;
    }
    em_paged_step st;
    if (!em_paged_step_plan(c, pc->p, ids, seqs, n_new, rows, pc->bucket_blocks, pc->max_blocks,
                            &st))
        return NULL; /* the blocks taken stay with their rows (freed with them) */
    int64_t b = st.b, t = st.t, r = st.rows, mb = st.mb;
    const em_model *m = pc->m;
    em_device *d = m->dev_embed;
    em_tensor *res = NULL;
    em_scope_push(c);
    int64_t *pid = malloc((size_t)(r * t) * sizeof *pid);
    if (!pid) {
        em_ctx_fail(c, EM_ERR_OOM, "paged_forward_compiled", "out of memory");
    } else if (em_to_host(c, em_cast(c, ids, EM_I64), pid, (size_t)(b * t) * sizeof *pid) == EM_OK) {
        for (int64_t i = b * t; i < r * t; i++) pid[i] = 0; /* padding rows */
        em_tensor *in[5] = {
            em_from_host_on(c, d, EM_I64, 2, (int64_t[]){r, t}, pid),
            em_from_host_on(c, d, EM_I64, 2, (int64_t[]){r, t}, st.pos),
            em_from_host_on(c, d, EM_I64, 1, (int64_t[]){r * t}, st.slots),
            em_from_host_on(c, d, EM_I64, 2, (int64_t[]){r, mb}, st.table),
            em_from_host_on(c, d, EM_I64, 1, (int64_t[]){r}, st.lens),
        };
        int64_t statics[1] = {last_only && t > 1};
        em_tensor *out = NULL;
        pc->cur = &st;
        if (!em_ctx_status(c) && em_compiled_call(c, pc->fn, in, 5, statics, 1, &out, 1) == 1) {
            if (r > b) out = em_narrow(c, out, 0, 0, b);
            res = em_keep(c, out);
        }
        pc->cur = NULL;
    }
    free(pid);
    em_scope_pop(c);
    if (res) em_paged_step_commit(pc->p, seqs, n_new, &st);
    em_paged_step_free(&st);
    return res;
}
