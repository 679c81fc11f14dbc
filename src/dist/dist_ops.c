/* The public collective ops (ember/dist.h): the group travels as its id in core's registry,
 * so the op table's rules and every backend's kernels can find it. */
#include <string.h>
#include <time.h>

#include "core/tensor_impl.h"
#include "dist/dist_impl.h"
#include "ops/dispatch.h"

static em_attr group_attr(const em_dist *g) { return em_attr_int(g ? g->group_id : 0); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs op on x and counts the call on g (em_dist_stats). */
static em_tensor *counted(EM_OP_ARGS, em_op_id id, int slot, em_tensor *x, const em_attr *a,
                          em_dist *g) {
    double t0 = now_s();
    if (c) c->collectives++;
    em_tensor *y = em_op_run(c, file, line, id, &x, 1, a, NULL, 0, NULL);
    if (g && x) {
        int64_t b = em_tensor_numel(x) * (int64_t)em_dtype_size(em_tensor_dtype(x));
        g->stats.calls++;
        g->stats.bytes += b;
        g->stats.calls_by_op[slot]++;
        g->stats.bytes_by_op[slot] += b;
        g->stats.seconds += now_s() - t0;
    }
    return y;
}

void em_dist_stats_get(const em_dist *g, em_dist_stats *out) {
    if (!out) return;
    if (g) *out = g->stats;
    else memset(out, 0, sizeof *out);
}

void em_dist_stats_reset(em_dist *g) {
    if (g) memset(&g->stats, 0, sizeof g->stats);
}

em_tensor *em_all_reduce_(EM_OP_ARGS, em_tensor *x, em_reduce_op op, em_dist *g) {
    em_attr a[2] = {em_attr_int(op), group_attr(g)};
    return counted(c, file, line, EM_OP_ALL_REDUCE, 0, x, a, g);
}

em_tensor *em_all_gather_(EM_OP_ARGS, em_tensor *x, int dim, em_dist *g) {
    em_attr a[2] = {em_attr_int(dim), group_attr(g)};
    return counted(c, file, line, EM_OP_ALL_GATHER, 1, x, a, g);
}

em_tensor *em_reduce_scatter_(EM_OP_ARGS, em_tensor *x, em_reduce_op op, int dim, em_dist *g) {
    em_attr a[3] = {em_attr_int(op), em_attr_int(dim), group_attr(g)};
    return counted(c, file, line, EM_OP_REDUCE_SCATTER, 2, x, a, g);
}

em_tensor *em_all_to_all_(EM_OP_ARGS, em_tensor *x, int split_dim, int concat_dim, em_dist *g) {
    em_attr a[3] = {em_attr_int(split_dim), em_attr_int(concat_dim), group_attr(g)};
    return counted(c, file, line, EM_OP_ALL_TO_ALL, 3, x, a, g);
}

em_tensor *em_ring_shift_(EM_OP_ARGS, em_tensor *x, int offset, em_dist *g) {
    em_attr a[2] = {em_attr_int(offset), group_attr(g)};
    return counted(c, file, line, EM_OP_RING_SHIFT, 4, x, a, g);
}
