/*
 * ember-sdpa: scaled dot-product attention on the CPU as a kernel package (ember/kernel_abi.h).
 * The attention is the built-in's own source (src/backends/cpu/sdpa_flash.h), compiled here with
 * the built-in's flags (ISO C, -O3), over the built-in's conversions and micro-kernels compiled
 * for the variant's ISA (sdpa_isa.inc), with Ember's thread pool and thread count from the call:
 * so a call the package takes gives the built-in's bits.
 *
 * supports() takes q, k, v of one float dtype (f32, bf16, f16), a mask that is absent, bool or of
 * those float dtypes, and only where Ember's own kernels run this variant's ISA
 * (SDPA_PKG_LEVELS: the built-in there runs the same micro-kernels); the rest goes to the
 * built-in. The same attention serves sdpa_lse (em_sdpa_lse, the ring attention's op): out in
 * q's dtype or f32, and the rows' log-sum-exp as a contiguous f32 [B, Hq, Tq].
 */
#include <stdio.h>
#include <string.h>

#include "backends/cpu/sdpa_flash.h"
#include "ember/kernel_abi.h"
#include "kernel_util.h"

void sdpa_pkg_env(sdpa_env *e); /* sdpa_isa.inc */

static int float_dtype(int dt) {
    return dt == EMBER_KDT_F32 || dt == EMBER_KDT_BF16 || dt == EMBER_KDT_F16;
}

/* "avx512 avx512bf16" holds the caller's level as a word */
static int level_ok(const ember_kernel_call *k) {
    const char *lv = kabi_cpu_level(k), *s = SDPA_PKG_LEVELS;
    size_t n = strlen(lv);
    for (const char *p = strstr(s, lv); n && p; p = strstr(p + 1, lv))
        if ((p == s || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return 1;
    return 0;
}

/* n_out 1: sdpa (out in q's dtype); 2: sdpa_lse (out in q's dtype or f32, lse f32 [B, Hq, Tq]) */
static int supports_n(const ember_kernel_call *k, int n_out) {
    if (!level_ok(k) || k->n_in < 3 || k->n_in > 4 || k->n_out != n_out) return 0;
    const ember_kernel_tensor *q = &k->in[0], *m = k->n_in > 3 ? &k->in[3] : NULL;
    for (int i = 0; i < 3; i++)
        if (k->in[i].ndim != 4 || k->in[i].dtype != q->dtype) return 0;
    int odt = k->out[0].dtype;
    if (!float_dtype(q->dtype) || !kabi_contiguous(&k->out[0]) ||
        (odt != q->dtype && (n_out == 1 || odt != EMBER_KDT_F32)))
        return 0;
    if (n_out == 2) {
        const ember_kernel_tensor *l = &k->out[1];
        if (l->dtype != EMBER_KDT_F32 || l->ndim != 3 || !kabi_contiguous(l) ||
            l->shape[0] != q->shape[0] || l->shape[1] != q->shape[1] || l->shape[2] != q->shape[2])
            return 0;
    }
    if (m && m->data && (m->ndim > 4 || (m->dtype != EMBER_KDT_BOOL && !float_dtype(m->dtype))))
        return 0;
    return kabi_attr(k, "scale") && kabi_attr(k, "causal") && kabi_attr(k, "window") &&
           kabi_attr(k, "softcap");
}

static int supports(const ember_kernel_call *k) { return supports_n(k, 1); }
static int supports_lse(const ember_kernel_call *k) { return supports_n(k, 2); }

static sdpa_view view_of(const ember_kernel_tensor *t) {
    sdpa_view v = {0};
    if (!t || !t->data) return v;
    v.data = t->data;
    v.dtype = t->dtype;
    v.ndim = t->ndim;
    for (int d = 0; d < t->ndim && d < 4; d++) {
        v.shape[d] = t->shape[d];
        v.strides[d] = t->strides[d];
    }
    return v;
}

static void serial_for(int64_t n, int64_t grain, sdpa_task_fn fn, void *user) {
    (void)grain;
    fn(user, 0, n, 0);
}

static int run(const ember_kernel_call *k, char *err, size_t err_n) {
    sdpa_env env = {0};
    sdpa_pkg_env(&env);
    env.parallel_for = k->parallel_for ? k->parallel_for : serial_for;
    env.threads = k->n_threads > 0 ? k->n_threads : 1;
    sdpa_args a = {view_of(&k->in[0]), view_of(&k->in[1]), view_of(&k->in[2]),
                   view_of(k->n_in > 3 ? &k->in[3] : NULL), k->out[0].data, k->out[0].dtype,
                   kabi_attr(k, "scale")->f, kabi_attr(k, "softcap")->f,
                   kabi_attr(k, "causal")->i != 0, kabi_attr(k, "window")->i,
                   k->n_out > 1 ? (float *)k->out[1].data : NULL};
    const char *what = "";
    if (!sdpa_flash_run(&env, &a, &what)) return 0;
    snprintf(err, err_n, "%s", what);
    return 1;
}

static const ember_kernel_impl impls[] = {
    KABI_IMPL("sdpa", SDPA_PKG_IMPL, EMBER_KDT_BIT(EMBER_KDT_F32) | EMBER_KDT_BIT(EMBER_KDT_BF16) |
                                         EMBER_KDT_BIT(EMBER_KDT_F16),
              10, supports, run),
    KABI_IMPL("sdpa_lse", SDPA_PKG_IMPL, EMBER_KDT_BIT(EMBER_KDT_F32) |
                                             EMBER_KDT_BIT(EMBER_KDT_BF16) |
                                             EMBER_KDT_BIT(EMBER_KDT_F16),
              10, supports_lse, run),
};

KABI_EXPORT_LIBRARY("ember-sdpa", impls)
