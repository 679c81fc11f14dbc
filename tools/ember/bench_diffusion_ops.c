/*
 * `ember bench diffusion`'s group norm and spatial attention rows (bench_diffusion_ops.h).
 *
 * Group norm is memory-bound: its bound is the bytes it must move (x read once, y written once)
 * at the triad probe's bandwidth (bench_limits.h: reads and a write, like the op), the probe run
 * before each call (as bench_interleaved, one probe for all rows), which also leaves the caches
 * cold for it. Attention is
 * compute-bound: 4 * B * H * Tq * Tk * D FLOPs (the two products) against the dtype's peak.
 */
#include "bench_diffusion_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_limits.h"

#define GN_REPS 9

int bench_attn_shapes(const em_unet2d_config *cfg, int64_t latent, int64_t ctx_len,
                      bench_attn_row *out) {
    int n = 0;
    int64_t l = latent;
    for (int i = 0; i <= cfg->n_blocks && n + 2 <= BENCH_DIFF_MAX_ATTN; i++) {
        bool mid = i == cfg->n_blocks;
        int bi = mid ? cfg->n_blocks - 1 : i;
        bool has = mid ? cfg->mid_block && cfg->mid_cross_attn
                       : cfg->down_blocks[i] == EM_UNET2D_BLOCK_CROSS_ATTN;
        int64_t heads = cfg->attn_heads[bi] > 0 ? cfg->attn_heads[bi] : 1;
        if (has)
            for (int k = 0; k < 2; k++)
                out[n++] = (bench_attn_row){2, heads, l * l, k ? ctx_len : l * l,
                                            cfg->block_out_channels[bi] / heads, k == 1, 0};
        if (i < cfg->n_blocks - 1) l /= 2;
    }
    return n;
}

typedef struct gn_job {
    em_ctx *c;
    em_tensor *x, *w, *b;
    int64_t groups;
    double eps;
    bool ok;
} gn_job;

static void gn_call(void *user) {
    gn_job *j = user;
    em_scope_push(j->c);
    em_tensor *y = em_group_norm(j->c, j->x, j->groups, j->w, j->b, j->eps);
    j->ok = j->ok && y && em_device_sync(j->c, em_ctx_device(j->c)) == EM_OK;
    em_scope_pop(j->c);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* bench_interleaved's measurement with one probe for all rows (its 3 x 256 MiB arrays made and
 * first-touched once) */
static void gn_interleaved(bench_probe *p, gn_job *j, double bytes, bench_gn_row *r) {
    double frac[GN_REPS], ms[GN_REPS], bw[GN_REPS];
    bench_probe_pass(p);
    gn_call(j);
    for (int k = 0; k < GN_REPS; k++) {
        bw[k] = bench_probe_pass(p);
        double t = bench_now();
        gn_call(j);
        t = bench_now() - t;
        ms[k] = t * 1e3;
        frac[k] = bytes / t / (bw[k] * 1e9);
    }
    qsort(frac, GN_REPS, sizeof *frac, cmp_d);
    qsort(ms, GN_REPS, sizeof *ms, cmp_d);
    qsort(bw, GN_REPS, sizeof *bw, cmp_d);
    r->frac = frac[GN_REPS / 2];
    r->ms = ms[GN_REPS / 2];
    r->probe_gbs = bw[GN_REPS / 2];
}

bool bench_time_group_norms(em_ctx *c, em_device *dev, em_dtype dt, int64_t groups, double eps,
                            bench_gn_row *rows, int n) {
    bench_probe *p = n ? bench_probe_create(true) : NULL;
    bool ok = !n || p;
    for (int i = 0; ok && i < n; i++) {
        bench_gn_row *r = &rows[i];
        const int64_t *s = r->s;
        em_scope_push(c);
        em_ctx_set_device(c, dev);
        em_tensor *x = em_randn(c, EM_F32, EM_SHAPE(s[0], s[1], s[2], s[3]), 31, 0.5, 2);
        gn_job j = {c, em_cast(c, x, dt),
                    em_cast(c, em_rand(c, EM_F32, EM_SHAPE(s[1]), 32, 0.5, 1.5), dt),
                    em_cast(c, em_rand(c, EM_F32, EM_SHAPE(s[1]), 33, -0.1, 0.1), dt), groups, eps,
                    true};
        j.ok = j.x && j.w && j.b;
        if (j.ok)
            gn_interleaved(p, &j, 2.0 * (double)em_tensor_numel(j.x) * (double)em_dtype_size(dt),
                           r);
        ok = j.ok;
        em_scope_pop(c);
    }
    bench_probe_free(p);
    if (!ok) fprintf(stderr, "ember bench diffusion: the group norm: %s\n",
                     em_ctx_status(c) ? em_ctx_error(c)->message : "out of memory");
    return ok;
}

typedef struct attn_job {
    em_ctx *c;
    em_tensor *q, *k, *v;
    bool ok;
} attn_job;

static void attn_call(void *user) {
    attn_job *j = user;
    em_scope_push(j->c);
    em_sdpa_params p = em_sdpa_default_params();
    em_tensor *y = em_sdpa(j->c, j->q, j->k, j->v, NULL, &p);
    j->ok = j->ok && y && em_device_sync(j->c, em_ctx_device(j->c)) == EM_OK;
    em_scope_pop(j->c);
}

bool bench_time_attn(em_ctx *c, em_device *dev, em_dtype dt, bench_attn_row *r) {
    em_scope_push(c);
    em_ctx_set_device(c, dev);
    em_tensor *q = em_randn(c, EM_F32, EM_SHAPE(r->b, r->h, r->tq, r->d), 41, 0, 1);
    em_tensor *k = em_randn(c, EM_F32, EM_SHAPE(r->b, r->h, r->tk, r->d), 42, 0, 1);
    em_tensor *v = em_randn(c, EM_F32, EM_SHAPE(r->b, r->h, r->tk, r->d), 43, 0, 1);
    attn_job j = {c, em_cast(c, q, dt), em_cast(c, k, dt), em_cast(c, v, dt), true};
    j.ok = j.q && j.k && j.v;
    if (j.ok) r->ms = bench_median_ms(attn_call, &j, 0.5);
    em_scope_pop(c);
    if (!j.ok) fprintf(stderr, "ember bench diffusion: the attention: %s\n",
                       em_ctx_status(c) ? em_ctx_error(c)->message : "?");
    return j.ok;
}

int bench_ops_peer_tasks(char *buf, size_t n, const bench_gn_row *gn, int n_gn, int64_t groups,
                         double eps, const bench_attn_row *at, int n_at) {
    int len = snprintf(buf, n, ", \"group_norm\": {\"groups\": %lld, \"eps\": %.17g, \"shapes\": [",
                       (long long)groups, eps);
    for (int i = 0; i < n_gn && len > 0 && (size_t)len < n; i++)
        len += snprintf(buf + len, n - (size_t)len, "%s[%lld, %lld, %lld, %lld]", i ? ", " : "",
                        (long long)gn[i].s[0], (long long)gn[i].s[1], (long long)gn[i].s[2],
                        (long long)gn[i].s[3]);
    if (len > 0 && (size_t)len < n)
        len += snprintf(buf + len, n - (size_t)len, "]}, \"attention\": [");
    for (int i = 0; i < n_at && len > 0 && (size_t)len < n; i++)
        len += snprintf(buf + len, n - (size_t)len, "%s[%lld, %lld, %lld, %lld, %lld]",
                        i ? ", " : "", (long long)at[i].b, (long long)at[i].h, (long long)at[i].tq,
                        (long long)at[i].tk, (long long)at[i].d);
    if (len > 0 && (size_t)len < n) len += snprintf(buf + len, n - (size_t)len, "]");
    return len;
}

static double gn_bytes(const bench_gn_row *r, em_dtype dt) {
    return 2.0 * (double)(r->s[0] * r->s[1] * r->s[2] * r->s[3]) * (double)em_dtype_size(dt);
}

void bench_print_group_norms(bool json, em_dtype dt, const bench_gn_row *r, int n,
                             int64_t groups, double eps, const bench_peer *peer) {
    char a[32], b[32], d[32], head[48];
    snprintf(head, sizeof head, "%sgroup norm %lld [N,C,H,W]", dt == EM_F32 ? "" : "bf16 ",
             (long long)groups);
    if (!json && n)
        printf("%-26s %9s %8s %8s %9s %8s %8s\n", head, "ember ms", "GB/s", "of bound",
               "torch ms", "of bound", "speedup");
    double probe = 0;
    for (int i = 0; i < n; i++) {
        char name[96], shape[64];
        const int64_t *s = r[i].s;
        snprintf(name, sizeof name, "gn_%lld_%lld_%lld_%lld", (long long)s[0], (long long)s[1],
                 (long long)s[2], (long long)s[3]);
        snprintf(shape, sizeof shape, "[%lld,%lld,%lld,%lld]", (long long)s[0], (long long)s[1],
                 (long long)s[2], (long long)s[3]);
        double bytes = gn_bytes(&r[i], dt), pms = bench_peer_ms(peer, name);
        double gbs = bytes / (r[i].ms * 1e-3) * 1e-9;
        double pgbs = pms > 0 ? bytes / (pms * 1e-3) * 1e-9 : -1;
        probe += r[i].probe_gbs / n;
        if (json) {
            printf("{\"bench\": \"diffusion_group_norm\", \"shape\": \"%s\", \"groups\": %lld, "
                   "\"eps\": %g, \"dtype\": \"%s\", \"ms\": %.6g, \"bytes\": %.6g, \"gbs\": %.6g, "
                   "\"bound_triad_gbs\": %.6g, \"fraction_of_bandwidth\": %.4f", shape,
                   (long long)groups, eps, em_dtype_name(dt), r[i].ms, bytes, gbs,
                   r[i].probe_gbs, r[i].frac);
            if (pms > 0)
                printf(", \"peer\": \"torch\", \"peer_ms\": %.6g, \"peer_gbs\": %.6g, "
                       "\"peer_fraction_of_bandwidth\": %.4f, \"speedup_vs_peer\": %.3f", pms,
                       pgbs, pgbs / r[i].probe_gbs, pms / r[i].ms);
            printf("}\n");
            continue;
        }
        printf("%-26s %9.4g %8.1f %7.1f%% %9s %8s %8s\n", shape, r[i].ms, gbs, 100 * r[i].frac,
               bench_cell(a, sizeof a, "%.4g", pms),
               bench_cell(b, sizeof b, "%.1f%%", pgbs > 0 ? 100 * pgbs / r[i].probe_gbs : -1),
               bench_cell(d, sizeof d, "%.2fx", pms > 0 ? pms / r[i].ms : -1));
    }
    if (!json && n)
        printf("group norm (eps %g, affine): bytes = x read once + y written once; bound = the "
               "triad probe's bandwidth (%.1f GB/s on average) run before each call, which leaves "
               "the caches cold (torch's calls each after a 256 MiB read); the median of %d\n",
               eps, probe, GN_REPS);
}

void bench_print_attns(bool json, em_dtype dt, const bench_attn_row *r, int n,
                       const bench_peer *peer, double peak_gflops) {
    char a[32], b[32], d[32];
    const char *pk = dt == EM_F32 ? "fp32" : "bf16";
    if (!json && n)
        printf("%-26s %9s %8s %8s %9s %8s %8s\n",
               dt == EM_F32 ? "sdpa [B,H,Tq,D]x[Tk]" : "bf16 sdpa [B,H,Tq,D]x[Tk]", "ember ms",
               "GFLOP/s", "of peak", "torch ms", "of peak", "speedup");
    for (int i = 0; i < n; i++) {
        char name[96], shape[64];
        snprintf(name, sizeof name, "attn_%lld_%lld_%lld_%lld_%lld", (long long)r[i].b,
                 (long long)r[i].h, (long long)r[i].tq, (long long)r[i].tk, (long long)r[i].d);
        snprintf(shape, sizeof shape, "[%lld,%lld,%lld,%lld]x[%lld]", (long long)r[i].b,
                 (long long)r[i].h, (long long)r[i].tq, (long long)r[i].d, (long long)r[i].tk);
        double fl = 4.0 * (double)(r[i].b * r[i].h * r[i].tq) * (double)(r[i].tk * r[i].d);
        double pms = bench_peer_ms(peer, name), gf = fl / (r[i].ms * 1e-3) * 1e-9;
        double pf = pms > 0 ? fl / (pms * 1e-3) * 1e-9 : -1;
        if (json) {
            printf("{\"bench\": \"diffusion_attention\", \"kind\": \"%s\", \"q\": [%lld, %lld, "
                   "%lld, %lld], \"tk\": %lld, \"dtype\": \"%s\", \"ms\": %.6g, \"flops\": %.6g, "
                   "\"fraction_of_%s_peak\": %.4f", r[i].cross ? "cross" : "self",
                   (long long)r[i].b, (long long)r[i].h, (long long)r[i].tq, (long long)r[i].d,
                   (long long)r[i].tk, em_dtype_name(dt), r[i].ms, fl, pk, gf / peak_gflops);
            if (pms > 0)
                printf(", \"peer\": \"torch\", \"peer_ms\": %.6g, \"peer_fraction_of_%s_peak\": "
                       "%.4f, \"speedup_vs_peer\": %.3f", pms, pk, pf / peak_gflops, pms / r[i].ms);
            printf("}\n");
            continue;
        }
        printf("%-26s %9.4g %8.1f %7.1f%% %9s %8s %8s\n", shape, r[i].ms, gf,
               100 * gf / peak_gflops, bench_cell(a, sizeof a, "%.4g", pms),
               bench_cell(b, sizeof b, "%.1f%%", pf > 0 ? 100 * pf / peak_gflops : -1),
               bench_cell(d, sizeof d, "%.2fx", pms > 0 ? pms / r[i].ms : -1));
    }
    if (!json && n)
        printf("sdpa: no mask, scale 1/sqrt(D); FLOPs = 4*B*H*Tq*Tk*D (the two products); "
               "Tk = Tq: self-attention, Tk = the text length: cross-attention\n");
}
