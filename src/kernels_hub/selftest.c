/*
 * The load-time self-test of a package's implementation (khub.h): it and the built-in run the
 * same small calls — element-wise ops on a few shapes; ragged_dot with plain, transposed and
 * packed experts and rows past the groups; sdpa and sdpa_lse (both outputs) at decode (keys
 * split over the threads) and prefill shapes with GQA, causal, window, softcap and masks, the
 * latter also with an f32 out from lower-precision inputs — in the first float dtype the
 * implementation declares. Calls its supports() declines are skipped; the first element that
 * differs beyond the dtype's tolerance fails it, with the op, the call and the element named.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "ember/ops.h"
#include "kernels_hub/khub.h"

/* One call: inputs (owned), attributes, the outputs' shapes and dtypes, what it is in words. */
#define ST_MAX_OUT 2
typedef struct st_case {
    em_tensor *in[4];
    int n_in;
    em_attr attrs[EM_MAX_ATTRS];
    int n_out; /* 0 is taken as 1 */
    int64_t oshape[ST_MAX_OUT][EM_MAX_DIMS];
    int ondim[ST_MAX_OUT];
    em_dtype odt[ST_MAX_OUT];
    bool ew; /* element-wise: the message names the flat index and the input */
    char what[200];
} st_case;

static float lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 65536.0f * 6.0f - 3.0f;
}

/* A new tensor of values in [-3, 3) (seeded), or of `fill` when it is not NaN. */
static em_tensor *tensor(em_ctx *c, em_dtype dt, int ndim, const int64_t *shape, uint32_t *seed,
                         float fill) {
    em_tensor *t = em_tensor_new(c, em_device_cpu(), dt, ndim, shape);
    float *v = t ? malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v) : NULL;
    if (!v) {
        em_tensor_release(t);
        return NULL;
    }
    for (int64_t j = 0; j < t->numel; j++) v[j] = isnan(fill) ? lcg(seed) : fill;
    em_convert(v, EM_F32, em_tensor_ptr(t), dt, t->numel);
    free(v);
    return t;
}

static void case_free(st_case *k) {
    for (int i = 0; i < 4; i++) em_tensor_release(k->in[i]);
    memset(k, 0, sizeof *k);
}

static bool case_ok(const st_case *k) {
    for (int i = 0; i < k->n_in; i++)
        if (!k->in[i]) return false;
    return true;
}

/* ---- the calls of each op -------------------------------------------------------------- */

static int ew_case(em_ctx *c, const em_op_def *op, em_dtype dt, int i, st_case *k) {
    static const int64_t shapes[][3] = {{2, 33, 1}, {7, 1, 1}, {3, 4, 5}};
    static const int ndims[] = {2, 1, 3};
    if (i >= 3) return 0;
    uint32_t seed = 12345;
    k->n_in = op->min_in;
    for (int j = 0; j < k->n_in; j++)
        k->in[j] = tensor(c, dt, ndims[i], shapes[i], &seed, NAN);
    k->ondim[0] = ndims[i];
    memcpy(k->oshape[0], shapes[i], sizeof shapes[i]);
    k->odt[0] = dt;
    k->ew = true;
    char sh[64];
    snprintf(k->what, sizeof k->what, "a %s %s input", em_shape_str(shapes[i], ndims[i], sh,
                                                                      sizeof sh),
             em_dtype_name(dt));
    return 1;
}

/* ragged_dot: lhs [m, 64], experts [3, 64, 64] as [G, N, K], as [G, K, N], and packed
 * (em_ragged_pack) when the dtype packs; group sizes leave the last rows to zeros. */
static int ragged_case(em_ctx *c, const em_op_def *op, em_dtype dt, int i, st_case *k) {
    (void)op;
    static const int64_t ms[] = {5, 12, 5};
    static const int32_t sizes[][3] = {{2, 0, 2}, {7, 0, 4}, {1, 3, 0}};
    if (i >= 3) return 0;
    uint32_t seed = 777 + (uint32_t)i;
    int64_t m = ms[i], kk = 64, n = 64, g = 3, gsh[] = {g};
    k->n_in = 3;
    k->in[0] = tensor(c, dt, EM_SHAPE(m, kk), &seed, NAN);
    k->in[1] = tensor(c, dt, EM_SHAPE(g, n, kk), &seed, NAN);
    k->in[2] = em_tensor_new(c, em_device_cpu(), EM_I32, 1, gsh);
    if (k->in[2]) memcpy(em_tensor_ptr(k->in[2]), sizes[i], sizeof sizes[i]);
    k->attrs[0].i = i != 2; /* rhs_nk */
    const char *layout = i == 2 ? "as [G, K, N]" : "as [G, N, K]";
    if (i == 1 && k->in[1]) {
        em_tensor *p = em_tensor_retain(em_ragged_pack(c, k->in[1])); /* the scope keeps one */
        em_tensor_release(k->in[1]);
        k->in[1] = p;
        layout = "packed as [G, N/32, K/2, 32, 2]";
        em_ctx_clear_error(c);
    }
    k->ondim[0] = 2;
    k->oshape[0][0] = m;
    k->oshape[0][1] = n;
    k->odt[0] = dt;
    snprintf(k->what, sizeof k->what, "ragged_dot of lhs [%lld,64] %s, experts [3,64,64] %s, "
                                      "group sizes %d,%d,%d", (long long)m, em_dtype_name(dt),
             layout, sizes[i][0], sizes[i][1], sizes[i][2]);
    return 1;
}

/* sdpa: {B, Hq, Hkv, Tq, Tk, D, causal, window, softcap (x10), mask: 0 none, 1 bool, 2 float} */
static int sdpa_case(em_ctx *c, const em_op_def *op, em_dtype dt, int i, st_case *k) {
    (void)op;
    static const int64_t cs[][10] = {
        {1, 2, 1, 1, 1100, 16, 1, 0, 0, 0}, /* decode: the keys split over the threads */
        {1, 4, 2, 20, 20, 16, 1, 0, 0, 0},  /* prefill, GQA: the tiled product */
        {1, 2, 1, 5, 40, 16, 1, 8, 50, 0},  /* on a cache, window and softcap */
        {1, 2, 2, 6, 9, 16, 0, 0, 0, 1},
        {2, 2, 1, 6, 9, 16, 0, 0, 0, 2},
    };
    if (i >= 5) return 0;
    const int64_t *s = cs[i];
    uint32_t seed = 4242 + (uint32_t)i;
    k->n_in = s[9] ? 4 : 3;
    k->in[0] = tensor(c, dt, EM_SHAPE(s[0], s[1], s[3], s[5]), &seed, NAN);
    k->in[1] = tensor(c, dt, EM_SHAPE(s[0], s[2], s[4], s[5]), &seed, NAN);
    k->in[2] = tensor(c, dt, EM_SHAPE(s[0], s[2], s[4], s[5]), &seed, NAN);
    if (s[9] == 1) {
        k->in[3] = tensor(c, EM_BOOL, EM_SHAPE(s[0], 1, s[3], s[4]), &seed, NAN);
        uint8_t *b = k->in[3] ? em_tensor_ptr(k->in[3]) : NULL;
        for (int64_t j = 0; b && j < k->in[3]->numel; j++) b[j] = j % 3 != 1;
    } else if (s[9] == 2) {
        k->in[3] = tensor(c, dt, EM_SHAPE(s[3], s[4]), &seed, NAN);
    }
    k->attrs[1].i = s[6];
    k->attrs[2].i = s[7];
    k->attrs[3].f = (double)s[8] / 10;
    k->ondim[0] = 4;
    int64_t o[] = {s[0], s[1], s[3], s[5]};
    memcpy(k->oshape[0], o, sizeof o);
    k->odt[0] = dt;
    if (op->id == EM_OP_SDPA_LSE) {
        /* out in q's dtype, or (odd cases, lower-precision q) in f32; the rows' lse in f32 */
        k->odt[0] = i % 2 ? EM_F32 : dt;
        k->attrs[4].i = k->odt[0];
        k->n_out = 2;
        k->ondim[1] = 3;
        memcpy(k->oshape[1], o, 3 * sizeof *o);
        k->odt[1] = EM_F32;
    }
    snprintf(k->what, sizeof k->what, "%s of q [%lld,%lld,%lld,%lld] %s, k and v [%lld,%lld,"
                                      "%lld,%lld]%s%s%s%s%s", op->name, (long long)s[0],
             (long long)s[1], (long long)s[3], (long long)s[5], em_dtype_name(dt), (long long)s[0],
             (long long)s[2], (long long)s[4], (long long)s[5], s[6] ? ", causal" : "",
             s[7] ? ", window 8" : "", s[8] ? ", softcap 5" : "",
             s[9] == 1 ? ", a bool mask" : s[9] == 2 ? ", a float mask" : "",
             k->odt[0] != dt ? ", out f32" : "");
    return 1;
}

typedef int (*case_fn)(em_ctx *c, const em_op_def *op, em_dtype dt, int i, st_case *k);

static case_fn cases_of(const em_op_def *op) {
    if (op->kind == EM_OPK_EW && op->min_in <= 2) return ew_case;
    if (op->id == EM_OP_RAGGED_DOT) return ragged_case;
    if (op->id == EM_OP_SDPA || op->id == EM_OP_SDPA_LSE) return sdpa_case;
    return NULL;
}

/* ---- running and comparing ------------------------------------------------------------- */

static void index_str(int64_t j, const int64_t *shape, int ndim, char *buf, size_t n) {
    int64_t idx[EM_MAX_DIMS];
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = shape[d] ? j % shape[d] : 0;
        j = shape[d] ? j / shape[d] : 0;
    }
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? "," : "", (long long)idx[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

/* The first element of h that differs from r beyond the tolerance, or -1. Element-wise ops
 * compare each value on its own scale; accumulating ops (sums of many products) on the
 * output's largest magnitude, which bounds their rounding. */
static int64_t first_diff(const float *r, const float *h, int64_t n, double tol, bool ew) {
    double big = 0;
    for (int64_t j = 0; !ew && j < n; j++)
        if (isfinite(r[j]) && fabs((double)r[j]) > big) big = fabs((double)r[j]);
    for (int64_t j = 0; j < n; j++) {
        double scale = 1 + (ew ? fabs((double)r[j]) : big);
        if (isnan(r[j]) != isnan(h[j]) ||
            (!isnan(r[j]) && fabs((double)r[j] - h[j]) > tol * scale))
            return j;
    }
    return -1;
}

/* Output o of h against r: 1 when within the dtype's tolerance, else 0 with why set. */
static int compare_out(const st_case *cs, int o, em_tensor *r_t, em_tensor *h_t, char *why,
                       size_t why_n) {
    float *r = em_cpu_to_f32(r_t), *h = em_cpu_to_f32(h_t);
    double tol = cs->odt[o] == EM_F32 ? (cs->ew ? 1e-5 : 1e-4) : 1e-2;
    int64_t j = r && h ? first_diff(r, h, r_t->numel, tol, cs->ew) : -1;
    int res = r && h && j < 0;
    if (j >= 0) {
        char at[96];
        if (cs->ew)
            snprintf(at, sizeof at, "%lld", (long long)j);
        else
            index_str(j, cs->oshape[o], cs->ondim[o], at, sizeof at);
        snprintf(why, why_n, "self-test failed: element %s of %s%s is %g, the built-in gives %g",
                 at, o ? "output 2 of " : "", cs->what, (double)h[j], (double)r[j]);
    }
    free(r);
    free(h);
    return res;
}

/* Runs k and the built-in on one call; 1 pass, 0 fail (why set), -1 declined. */
static int run_case(em_ctx *c, em_kimpl *k, em_kernel_fn builtin, st_case *cs, char *why,
                    size_t why_n) {
    const em_op_def *op = em_op_get(k->op);
    int n_out = cs->n_out > 0 ? cs->n_out : 1;
    em_tensor *o_ref[ST_MAX_OUT] = {0}, *o_hub[ST_MAX_OUT] = {0};
    int res = 0;
    bool made = true;
    for (int o = 0; o < n_out; o++) {
        o_ref[o] = em_tensor_new(c, em_device_cpu(), cs->odt[o], cs->ondim[o], cs->oshape[o]);
        o_hub[o] = em_tensor_new(c, em_device_cpu(), cs->odt[o], cs->ondim[o], cs->oshape[o]);
        made = made && o_ref[o] && o_hub[o];
    }
    if (!made || !case_ok(cs)) goto out;
    em_kernel_args a = {c, op, cs->in, cs->n_in, o_hub, n_out, cs->attrs};
    if (!k->supports(k, &a, EM_KMODE_INFERENCE)) {
        res = -1;
        goto out;
    }
    if (em_kimpl_run(k, &a) != EM_OK) {
        snprintf(why, why_n, "%s failed: %s", cs->what, em_ctx_error(c)->message);
        goto out;
    }
    a.out = o_ref;
    if (builtin(&a) != EM_OK) {
        snprintf(why, why_n, "the built-in failed on %s: %s", cs->what, em_ctx_error(c)->message);
        goto out;
    }
    res = 1;
    for (int o = 0; res && o < n_out; o++) res = compare_out(cs, o, o_ref[o], o_hub[o], why, why_n);
out:
    for (int o = 0; o < n_out; o++) {
        em_tensor_release(o_ref[o]);
        em_tensor_release(o_hub[o]);
    }
    if (res == 0 && !why[0]) snprintf(why, why_n, "out of memory");
    return res;
}

bool khub_self_test(em_kimpl *k, char *why, size_t why_n) {
    why[0] = 0;
    const em_op_def *op = em_op_get(k->op);
    em_kernel_fn builtin = em_device_cpu()->be->kernels[k->op];
    case_fn make = cases_of(op);
    if (!make || !builtin) {
        snprintf(why, why_n, "no self-test for %s (element-wise ops, ragged_dot, sdpa and sdpa_lse so far)",
                 op->name);
        return true;
    }
    em_dtype dt = EM_F32;
    const em_dtype order[] = {EM_F32, EM_BF16, EM_F16};
    for (int i = 2; i >= 0; i--)
        if (k->dtypes & ((uint64_t)1 << order[i])) dt = order[i];
    em_ctx *c = em_ctx_create();
    if (!c) {
        snprintf(why, why_n, "out of memory");
        return false;
    }
    int ran = 0;
    bool ok = true;
    st_case cs;
    memset(&cs, 0, sizeof cs);
    for (int i = 0; ok && make(c, op, dt, i, &cs); i++) {
        int r = run_case(c, k, builtin, &cs, why, why_n);
        ok = r != 0;
        ran += r == 1;
        case_free(&cs);
        em_ctx_clear_error(c);
    }
    case_free(&cs);
    em_ctx_free(c);
    if (ok && !ran) snprintf(why, why_n, "self-test skipped: it declined every test call");
    return ok;
}
