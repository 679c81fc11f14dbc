/* Tensor parallelism's weight slices and row-parallel linears, context parallelism's token
 * split and gathers, for the diffusion transformers (tp_impl.h). */
#include "diffusion/tp_impl.h"

bool diff_tp_init(em_ctx *c, diff_tp *t, em_dist *g, const char *device, const char *op) {
    *t = (diff_tp){.size = 1};
    if (!g || em_dist_world_size(g) <= 1) {
        t->dev = device ? em_device_get(c, device) : em_ctx_device(c);
        return t->dev != NULL;
    }
    t->g = g;
    t->rank = em_dist_rank(g);
    t->size = em_dist_world_size(g);
    t->dev = em_dist_device(g) ? em_dist_device(g) : em_device_get(c, "cpu");
    if (device && t->dev && em_device_get(c, device) != t->dev) {
        if (!em_ctx_status(c))
            em_ctx_fail(c, EM_ERR_UNSUPPORTED, op, "tensor parallelism: rank %d runs on %s (%s), "
                        "not on %s", t->rank, em_device_name(t->dev),
                        em_dist_device(g) ? "its device in the device group"
                                          : "collectives over MPI", device);
        return false;
    }
    return t->dev != NULL;
}

bool diff_tp_check(em_ctx *c, const diff_tp *t, const char *op, const char *dir,
                   const char *what, int64_t size) {
    if (size % t->size == 0) return true;
    em_ctx_fail(c, EM_ERR_SHAPE, op, "tensor parallelism: %s (%lld) of %s is not divisible by "
                "the degree %d", what, (long long)size, dir, t->size);
    return false;
}

unet_loader diff_tp_loader(const unet_loader *l, const diff_tp *t) {
    unet_loader h = *l;
    if (t->size > 1) h.dev = em_device_get(l->c, "cpu");
    return h;
}

bool diff_tp_shard(em_ctx *c, const diff_tp *t, unet_param *p, bool row_par,
                   const int64_t *pieces, int n_pieces) {
    if (t->size <= 1) return true;
    int64_t r = t->rank, n = t->size;
    em_tensor **ts[2] = {&p->w, &p->b};
    em_scope_push(c);
    for (int i = 0; i < 2; i++) {
        if (!*ts[i]) continue;
        em_tensor *w = *ts[i], *s = w;
        int dim = row_par ? 1 : 0;
        if (!row_par || i == 0) { /* a row-parallel bias stays whole */
            int64_t whole = em_tensor_dim(w, dim), at = 0;
            int np = pieces ? n_pieces : 1;
            em_tensor *parts[4];
            for (int k = 0; k < np && k < 4; k++) {
                int64_t size = pieces ? pieces[k] : whole, part = size / n;
                parts[k] = em_narrow(c, w, dim, at + r * part, part);
                at += size;
            }
            s = np > 1 ? em_cat(c, parts, np, dim) : em_contiguous(c, parts[0]);
        }
        if (s && em_tensor_device(s) != t->dev) s = em_to(c, s, t->dev);
        s = s ? em_detach(c, s) : NULL;
        if (!s) break;
        em_tensor_release(w);
        *ts[i] = s;
    }
    em_scope_pop(c);
    return em_ctx_status(c) == EM_OK;
}

em_tensor *diff_tp_lin_rows(em_ctx *c, const diff_tp *t, const unet_param *p, em_tensor *x) {
    if (t->size <= 1) return em_linear(c, x, p->w, p->b);
    em_tensor *y = em_all_reduce(c, em_linear(c, x, p->w, NULL), EM_REDUCE_SUM, t->g);
    return p->b ? em_add(c, y, p->b) : y;
}

void diff_cp_free(diff_cp *cp) {
    em_dist_free(cp->ring);
    em_dist_free(cp->uly);
    cp->ring = cp->uly = NULL;
}

em_cp_schedule diff_cp_schedule(const diff_cp *cp) {
    return cp->ring_deg == 1 && cp->uly_deg > 1 ? EM_CP_ULYSSES : cp->schedule;
}

/* EM_ERR_INVALID_ARG unless degrees (r, u) fit cp's group (anything without a group). */
static em_status degrees_fit(em_ctx *c, const diff_cp *cp, int r, int u, const char *op,
                             const char *dir) {
    if (!cp->g || !r || (int64_t)r * u == cp->size) return EM_OK;
    return em_ctx_fail(c, EM_ERR_INVALID_ARG, op, "context parallelism of %s: ring_degree %d x "
                       "ulysses_degree %d is not the group's %d ranks", dir, r, u, cp->size);
}

/* The mesh of cp's degrees over cp->g (none without a group, without degrees or with one of
 * them 1); the degrees were checked. On failure the degrees are dropped (the schedule alone). */
static em_status make_mesh(em_ctx *c, diff_cp *cp) {
    diff_cp_free(cp);
    if (!cp->g || cp->ring_deg <= 1 || cp->uly_deg <= 1) return EM_OK;
    em_status st = em_dist_mesh2d(c, cp->g, cp->ring_deg, cp->uly_deg, &cp->ring, &cp->uly);
    if (st) cp->ring_deg = cp->uly_deg = 0;
    return st;
}

em_status diff_cp_set(em_ctx *c, diff_cp *cp, em_dist *g, em_dist *tp, em_device *dev,
                      const char *op, const char *dir) {
    diff_cp keep = {.schedule = cp->schedule, .ring_deg = cp->ring_deg, .uly_deg = cp->uly_deg};
    if (!g || em_dist_world_size(g) <= 1) {
        diff_cp_free(cp);
        *cp = keep;
        cp->size = 1;
        return EM_OK;
    }
    if (tp && tp == g)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, op, "context parallelism of %s: its group is "
                           "the one of its tensor parallelism (degree %d); both at once take "
                           "two groups (em_dist_mesh2d: tensor parallelism over one, context "
                           "parallelism over the other)", dir, em_dist_world_size(tp));
    em_device *want = em_dist_device(g) ? em_dist_device(g) : em_device_get(c, "cpu");
    if (want != dev)
        return em_ctx_fail(c, EM_ERR_UNSUPPORTED, op, "context parallelism of %s: rank %d's "
                           "transformer is on %s, its group runs on %s", dir, em_dist_rank(g),
                           em_device_name(dev), em_device_name(want));
    diff_cp next = keep;
    next.g = g;
    next.rank = em_dist_rank(g);
    next.size = em_dist_world_size(g);
    if (degrees_fit(c, &next, keep.ring_deg, keep.uly_deg, op, dir)) return em_ctx_status(c);
    diff_cp_free(cp);
    *cp = next;
    return make_mesh(c, cp);
}

em_status diff_cp_set_degrees(em_ctx *c, diff_cp *cp, int ring_degree, int ulysses_degree,
                              const char *op, const char *dir) {
    if (!(ring_degree == 0 && ulysses_degree == 0) && (ring_degree < 1 || ulysses_degree < 1))
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, op, "context parallelism of %s: ring_degree "
                           "%d and ulysses_degree %d; need both >= 1 (or both 0: unset)", dir,
                           ring_degree, ulysses_degree);
    if (degrees_fit(c, cp, ring_degree, ulysses_degree, op, dir)) return em_ctx_status(c);
    cp->ring_deg = ring_degree;
    cp->uly_deg = ulysses_degree;
    return make_mesh(c, cp);
}

em_tensor *diff_cp_share(em_ctx *c, const diff_cp *cp, em_tensor *x, int dim, const char *op,
                         const char *what) {
    if (!cp->g || !x) return x;
    int64_t S = em_tensor_dim(x, dim);
    if (S % cp->size) {
        em_ctx_fail(c, EM_ERR_SHAPE, op, "context parallelism: %s do not divide over %d ranks",
                    what, cp->size);
        return NULL;
    }
    if (em_dist_device(cp->g))
        return em_reduce_scatter(c, em_contiguous(c, x), EM_REDUCE_MAX, dim, cp->g);
    return em_contiguous(c, em_narrow(c, x, dim, cp->rank * (S / cp->size), S / cp->size));
}

em_tensor *diff_cp_local(em_ctx *c, const diff_cp *cp, em_tensor *x, const char *op,
                         const char *what) {
    return diff_cp_share(c, cp, x, 1, op, what);
}

em_tensor *diff_cp_gather(em_ctx *c, const diff_cp *cp, em_tensor *x, int dim) {
    if (!cp->g || !x) return x;
    return em_all_gather(c, em_contiguous(c, x), dim, cp->g);
}

em_status diff_cp_set_schedule(em_ctx *c, diff_cp *cp, em_cp_schedule s, const char *op,
                               const char *dir) {
    if (s != EM_CP_RING && s != EM_CP_ALL_GATHER && s != EM_CP_ULYSSES)
        return em_ctx_fail(c, EM_ERR_INVALID_ARG, op, "context parallelism of %s: schedule %d "
                           "is not EM_CP_RING (0), EM_CP_ALL_GATHER (1) or EM_CP_ULYSSES (2)",
                           dir, (int)s);
    cp->schedule = s;
    return EM_OK;
}
