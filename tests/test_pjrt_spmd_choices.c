/*
 * The SPMD shard choices for MoE layers beyond the plan (em_model_options.spmd_split_gate_up:
 * the fused gate/up stack split by its hidden dim; ep_size = spmd: the stacks split by expert)
 * run on 2 devices of XLA's CPU plugin and give the unpartitioned step's logits: the shardings
 * only place the weights. test_tpu_aot_spmd counts what they cost on TPU chips. Without XLA's
 * CPU plugin the test prints a loud SKIP.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ember/ember.h"
#include "harness.h"

/* The last position's logits of a 4-token prompt through the compiled step over `spmd`
 * devices (0: one); NULL on failure. */
static float *logits_of(em_ctx *c, em_device *d, const char *family, int spmd, bool split,
                        int ep, int64_t *vocab) {
    em_model_options o = em_model_default_options();
    o.device = "xla:0";
    o.dtype = EM_F32;
    o.progress = false;
    o.offline = true;
    o.spmd = spmd;
    o.spmd_split_gate_up = split;
    o.ep_size = ep;
    em_model *m = em_model_load(c, em_test_fixture_path("models", family), &o);
    float *out = NULL;
    if (!m) return NULL;
    em_scope_push(c);
    em_kv_cache *kv = em_kv_cache_create(c, m, 1, 64);
    int64_t ids[4] = {5, 17, 3, 42};
    em_tensor *t = em_from_host_on(c, d, EM_I64, EM_SHAPE(1, 4), ids);
    em_model_compiled *mc = kv ? em_model_compile(c, m, kv, 64) : NULL;
    em_tensor *lg = mc ? em_model_forward_compiled(c, mc, t, NULL, true) : NULL;
    if (lg) {
        *vocab = em_tensor_dim(lg, em_tensor_ndim(lg) - 1);
        out = malloc((size_t)*vocab * sizeof *out);
        em_tensor *f = em_cast(c, lg, EM_F32);
        if (out && (!f || em_to_host(c, f, out, (size_t)*vocab * sizeof *out))) {
            free(out);
            out = NULL;
        }
    }
    em_model_compiled_free(mc);
    em_kv_cache_free(kv);
    em_scope_pop(c);
    em_model_free(m);
    return out;
}

/* The gate/up stack split by its hidden dim, and the stacks split by expert: the same logits
 * as the unpartitioned step (so the shardings are only a placement). */
static void test_moe_shard_choices_run(void) {
    setenv("EMBER_PJRT_OPTIONS", "cpu_device_count=2", 0);
    em_ctx *c = em_ctx_create();
    em_device *d = em_test_xla_or_skip(c);
    if (!d) goto out;
    if (!em_device_get(c, "xla:1")) {
        em_test_skip("XLA's CPU plugin has one device here (EMBER_PJRT_OPTIONS=%s)",
                     getenv("EMBER_PJRT_OPTIONS"));
        em_ctx_clear_error(c);
        goto out;
    }
    int64_t v0 = 0, v1 = 0, v2 = 0;
    float *ref = logits_of(c, d, "qwen3_moe", 0, false, 0, &v0);
    float *split = logits_of(c, d, "qwen3_moe", 2, true, 0, &v1);
    float *ep = logits_of(c, d, "qwen3_moe", 2, false, 2, &v2);
    CHECK_MSG(ref && split && ep && v0 == v1 && v0 == v2, "%s",
              em_ctx_status(c) ? em_ctx_error(c)->message : "");
    double e1 = 0, e2 = 0;
    for (int64_t i = 0; ref && split && ep && i < v0; i++) {
        double a = ref[i] - split[i], b = ref[i] - ep[i];
        if (a < 0) a = -a;
        if (b < 0) b = -b;
        if (a > e1) e1 = a;
        if (b > e2) e2 = b;
    }
    CHECK_MSG(e1 < 1e-4 && e2 < 1e-4, "max |diff|: gate/up split %g, by expert %g", e1, e2);
    printf("qwen3_moe x2 on xla: the step's logits split by H within %.2g, by expert within "
           "%.2g of the unpartitioned step's\n", e1, e2);
    free(ref);
    free(split);
    free(ep);
out:
    em_ctx_clear_error(c);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_moe_shard_choices_run))
