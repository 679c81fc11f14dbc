/*
 * `ember bench diffusion`'s op rows after the 3x3 conv's: group norm and spatial attention alone
 * at the UNet's shapes (bench_diffusion_ops.c), each next to torch's in the same run (the peer
 * script's "gn_..." and "attn_..." results).
 */
#ifndef EMBER_BENCH_DIFFUSION_OPS_H
#define EMBER_BENCH_DIFFUSION_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "bench_util.h"
#include "ember/ember.h"

/* a self- and a cross-attention per attention block (the down blocks' and the mid block's) */
#define BENCH_DIFF_MAX_ATTN (2 * (EM_UNET2D_MAX_BLOCKS + 1))

/* em_group_norm on x[N, C, H, W]: ms (median over calls each right after a pass of the triad
 * probe, so each starts with cold caches), the probe's median GB/s and the median fraction of
 * it (bytes: x read once + y written once, the minimum any group norm moves). */
typedef struct bench_gn_row {
    int64_t s[4];
    double ms, probe_gbs, frac;
} bench_gn_row;

/* em_sdpa of q[b, h, tq, d] on k, v[b, h, tk, d] (no mask, scale 1/sqrt(d)): median ms. */
typedef struct bench_attn_row {
    int64_t b, h, tq, tk, d;
    bool cross; /* keys are the text states (tk = their length) */
    double ms;
} bench_attn_row;

/* The UNet's spatial attentions at a latent size (batch 2): for each down block with
 * cross-attention and the mid block's (when it has one) at its resolution, the self-attention
 * (tk = tq = H*W) and the cross-attention (tk = ctx_len), heads attn_heads[i] of
 * block_out_channels[i] / heads dims. Returns the count (<= BENCH_DIFF_MAX_ATTN). */
int bench_attn_shapes(const em_unet2d_config *cfg, int64_t latent, int64_t ctx_len,
                      bench_attn_row *out);

/* Times the rows (random inputs in dt on dev); false with the error printed. */
bool bench_time_group_norms(em_ctx *c, em_device *dev, em_dtype dt, int64_t groups, double eps,
                            bench_gn_row *rows, int n);
bool bench_time_attn(em_ctx *c, em_device *dev, em_dtype dt, bench_attn_row *r);

/* The peer's task entries: "group_norm": {...}, "attention": [...] (with a leading ", "). */
int bench_ops_peer_tasks(char *buf, size_t n, const bench_gn_row *gn, int n_gn, int64_t groups,
                         double eps, const bench_attn_row *at, int n_at);

/* The tables (or JSON lines "diffusion_group_norm", "diffusion_attention"). peak_gflops: the
 * dtype's FLOP peak. torch's group norm fraction is of the row's probe bandwidth (measured next
 * to Ember's calls, not torch's). */
void bench_print_group_norms(bool json, em_dtype dt, const bench_gn_row *r, int n,
                             int64_t groups, double eps, const bench_peer *peer);
void bench_print_attns(bool json, em_dtype dt, const bench_attn_row *r, int n,
                       const bench_peer *peer, double peak_gflops);

#endif
