/* Tensor and context parallelism of the diffusion transformers (DiT in dit.c, SD3 and Flux over
 * mmdit.c). Tensor parallelism as diffusers' TensorParallelConfig splits them: attention heads
 * (q/k/v by rows, column-parallel; the output projection by columns, row-parallel, its partial
 * products all-reduced) and the feed-forward (up projection by rows, down by columns). Context
 * parallelism as its ContextParallelConfig: the image tokens split over the ranks, the attention
 * over every rank's keys and values by a ring (cp_attention.c: the blocks passed along with
 * em_ring_shift, merged by log-sum-exp), by gathering them all or by Ulysses' all-to-all. A rank of
 * a device group runs on its device; a rank of a process group on the CPU (its collectives are MPI
 * calls). */
#ifndef EMBER_DIFFUSION_TP_IMPL_H
#define EMBER_DIFFUSION_TP_IMPL_H

#include "diffusion/unet_impl.h"
#include "ember/dist.h"

typedef struct diff_tp {
    em_dist *g;    /* NULL: no tensor parallelism */
    int rank, size; /* 0 and 1 without */
    em_device *dev; /* where this rank's slices go */
} diff_tp;

/* t from group g (NULL or one rank: none, t->dev = the requested device or c's). With a group,
 * the device is the group's (its rank's device, or the CPU for a process group); a `device`
 * other than that fails (EM_ERR_UNSUPPORTED) naming op and the rank. False with the error. */
bool diff_tp_init(em_ctx *c, diff_tp *t, em_dist *g, const char *device, const char *op);
/* EM_ERR_SHAPE "tensor parallelism: <what> (<size>) of <dir> is not divisible by the degree N"
 * unless size % t->size == 0. */
bool diff_tp_check(em_ctx *c, const diff_tp *t, const char *op, const char *dir,
                   const char *what, int64_t size);
/* The loader the split weights come through: l's, on the CPU under tensor parallelism (sliced
 * there, then moved: a PJRT device would keep the whole weight otherwise). */
unet_loader diff_tp_loader(const unet_loader *l, const diff_tp *t);
/* Rank t->rank's slice of a linear, moved to t->dev. The split dimension (rows column-parallel,
 * columns row-parallel) is made of n_pieces consecutive pieces (NULL: one, the whole
 * dimension); the rank's part of each, concatenated. Column-parallel splits the bias alike; a
 * row-parallel bias stays whole (added once, after the all-reduce). Piece sizes were checked
 * divisible. No-op without tensor parallelism. False with the error. */
bool diff_tp_shard(em_ctx *c, const diff_tp *t, unet_param *p, bool row_par,
                   const int64_t *pieces, int n_pieces);
/* A row-parallel linear: the partial product summed over the ranks, then the whole bias; the
 * whole layer without tensor parallelism. In the caller's scope. */
em_tensor *diff_tp_lin_rows(em_ctx *c, const diff_tp *t, const unet_param *p, em_tensor *x);

typedef struct diff_cp {
    em_dist *g;     /* NULL: no context parallelism */
    int rank, size; /* 0 and 1 without */
    em_cp_schedule schedule; /* how the attention meets every rank's keys (ring by default) */
    /* diffusers' ring_degree x ulysses_degree (0, 0: unset, the schedule decides). With g and
     * both > 1: the mesh (em_dist_mesh2d of g), owned here: Ulysses over uly (consecutive
     * ranks), the ring over ring; rank = ring rank * uly_deg + uly rank. */
    int ring_deg, uly_deg;
    em_dist *ring, *uly;
} diff_cp;

/* Sets *cp from group g (NULL or one rank: none; the schedule and degrees are kept) for a model
 * on dev split by tensor parallelism over tp (NULL: none; op and dir name the model): tensor
 * parallelism over one group and context parallelism over another work together (the rank's
 * heads of the rank's tokens); EM_ERR_INVALID_ARG when g is tp itself, EM_ERR_UNSUPPORTED when
 * g's device (the CPU for a process group) is not dev. */
em_status diff_cp_set(em_ctx *c, diff_cp *cp, em_dist *g, em_dist *tp, em_device *dev,
                      const char *op, const char *dir);
/* This rank's tokens [rank*T/R, +T/R) of x [N, T, ...] along dim 1 (x itself without context
 * parallelism): diff_cp_share's, `what` describing T. */
em_tensor *diff_cp_local(em_ctx *c, const diff_cp *cp, em_tensor *x, const char *op,
                         const char *what);
/* This rank's share [rank*S/R, +S/R) of x along dim, of a tensor every rank holds whole and
 * alike (x without context parallelism); S not divisible by R fails (EM_ERR_SHAPE) naming
 * `what`. Over a process group a narrow; over a device group a max-reduce-scatter of the
 * identical copies (exact): every rank of a device group traces the same compiled program, so
 * the rank may not appear as a constant in it. Contiguous, in the caller's scope. */
em_tensor *diff_cp_share(em_ctx *c, const diff_cp *cp, em_tensor *x, int dim, const char *op,
                         const char *what);
/* Every rank's x along dim (x without context parallelism), in rank order: contiguous. */
em_tensor *diff_cp_gather(em_ctx *c, const diff_cp *cp, em_tensor *x, int dim);
/* Scaled dot-product attention (scale 1/sqrt(hd), no mask) of this rank's queries q
 * [N, H, Sq, hd] over every rank's keys and values k, v [N, H, S/R, hd] (this rank's block
 * given; in rank order) and the fixed ones kf, vf [N, H, L, hd] every rank holds whole (the
 * text tokens of joint attention; NULL: none), which come first (fixed_first) or last in the
 * key order. [N, H, Sq, hd] in q's dtype. Without context parallelism one em_sdpa over
 * [k; kf] or [kf; k]; with it, cp->schedule's: EM_CP_ALL_GATHER gathers k and v (em_sdpa
 * over the whole sequence), EM_CP_RING keeps one block at a time (R steps of attention merged
 * by log-sum-exp in f32, the blocks passed along the ring by em_ring_shift), EM_CP_ULYSSES
 * trades the token split for a head split (em_all_to_all; the fixed tokens' rows of the rank's
 * heads; H % R != 0 is EM_ERR_SHAPE) and back, the fixed rows' heads all-gathered. In the
 * caller's scope; NULL with the error (or when an input is NULL, the error already set). */
em_tensor *diff_cp_attention(em_ctx *c, const diff_cp *cp, em_tensor *q, em_tensor *k,
                             em_tensor *v, em_tensor *kf, em_tensor *vf, bool fixed_first);
/* Sets diffusers' ring and Ulysses degrees (both >= 1, or both 0: unset; EM_ERR_INVALID_ARG
 * naming op and dir otherwise). With a group set, their product must be its size (else
 * EM_ERR_INVALID_ARG naming the three), and both > 1 makes the mesh's sub-groups (a collective:
 * every rank calls it in the same order); diff_cp_set does the same with degrees set before. */
em_status diff_cp_set_degrees(em_ctx *c, diff_cp *cp, int ring_degree, int ulysses_degree,
                              const char *op, const char *dir);
/* Frees the mesh's sub-groups (cp stays usable without them: the degrees are kept). */
void diff_cp_free(diff_cp *cp);
/* The schedule cp runs: EM_CP_ULYSSES when the degrees say Ulysses alone (ring_degree 1),
 * else cp->schedule (the hybrid when cp->ring and cp->uly are set). */
em_cp_schedule diff_cp_schedule(const diff_cp *cp);
/* Sets the schedule of cp (EM_ERR_INVALID_ARG naming op and dir for an unknown one). */
em_status diff_cp_set_schedule(em_ctx *c, diff_cp *cp, em_cp_schedule s, const char *op,
                               const char *dir);

#endif
