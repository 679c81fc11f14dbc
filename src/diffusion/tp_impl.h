/* Tensor and context parallelism of the diffusion transformers (DiT in dit.c, SD3 and Flux over
 * mmdit.c). Tensor parallelism as diffusers' TensorParallelConfig splits them: attention heads
 * (q/k/v by rows, column-parallel; the output projection by columns, row-parallel, its partial
 * products all-reduced) and the feed-forward (up projection by rows, down by columns). Context
 * parallelism as its ContextParallelConfig: the image tokens split over the ranks, keys and
 * values all-gathered. A rank of a device group runs on its device; a rank of a process group on
 * the CPU (its collectives are MPI calls). */
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
} diff_cp;

/* Sets *cp from group g (NULL or one rank: none) for a model on dev split tp_size ways by
 * tensor parallelism (op and dir name it): EM_ERR_UNSUPPORTED when tp_size > 1 (one or the
 * other) or when g's device (the CPU for a process group) is not dev. */
em_status diff_cp_set(em_ctx *c, diff_cp *cp, em_dist *g, int tp_size, em_device *dev,
                      const char *op, const char *dir);
/* This rank's tokens [rank*T/R, +T/R) of x [N, T, ...] along dim 1 (x itself without context
 * parallelism); T not divisible by R fails (EM_ERR_SHAPE) naming `what` (T's description). */
em_tensor *diff_cp_local(em_ctx *c, const diff_cp *cp, em_tensor *x, const char *op,
                         const char *what);
/* Every rank's x along dim (x without context parallelism), in rank order: contiguous. */
em_tensor *diff_cp_gather(em_ctx *c, const diff_cp *cp, em_tensor *x, int dim);

#endif
