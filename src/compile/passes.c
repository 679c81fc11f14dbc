/*
 * Graph passes that every lowering shares. They keep program order (the order of writes) and
 * never touch a node that writes (ASSIGN, INDEX_COPY) except to keep it alive.
 */
#include <stdlib.h>
#include <string.h>

#include "compile/trace.h"

int em_pass_dce(em_graph *g) {
    bool *need = calloc((size_t)g->n_vals + 1, sizeof *need);
    if (!need) return 0; /* keeping everything is always correct */
    for (int i = 0; i < g->n_outputs; i++) need[g->outputs[i]] = true;
    int removed = 0;
    for (int n = g->n_nodes - 1; n >= 0; n--) {
        em_gnode *nd = &g->nodes[n];
        if (nd->dead) continue;
        bool live = em_gnode_writes(nd);
        for (int o = 0; o < nd->n_out && !live; o++) live = need[nd->out0 + o];
        if (!live) {
            nd->dead = true;
            removed++;
            continue;
        }
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] >= 0) need[nd->in[i]] = true;
    }
    free(need);
    return removed;
}

static bool attr_eq(const em_attr *a, const em_attr *b) {
    if (a->i != b->i || memcmp(&a->f, &b->f, sizeof a->f) || a->n != b->n) return false;
    return a->n <= 0 || !memcmp(a->v, b->v, (size_t)a->n * sizeof *a->v);
}

static bool same_call(const em_gnode *a, const em_gnode *b) {
    if (a->op != b->op || a->n_in != b->n_in || a->n_out != b->n_out) return false;
    if (memcmp(a->in, b->in, (size_t)a->n_in * sizeof *a->in)) return false;
    const em_op_def *op = em_op_get(a->op);
    for (int i = 0; i < op->n_attrs; i++)
        if (!attr_eq(&a->attrs[i], &b->attrs[i])) return false;
    return true;
}

static uint64_t call_hash(const em_gnode *n, int epoch) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n->op ^ ((uint64_t)epoch << 32);
    for (int i = 0; i < n->n_in; i++) h = (h ^ (uint64_t)(n->in[i] + 2)) * 1099511628211ull;
    const em_op_def *op = em_op_get(n->op);
    for (int i = 0; i < op->n_attrs; i++)
        h = (h ^ (uint64_t)n->attrs[i].i ^ (uint64_t)n->attrs[i].n) * 1099511628211ull;
    return h;
}

int em_pass_cse(em_ctx *c, em_graph *g) {
    int *map = malloc((size_t)g->n_vals * sizeof *map);
    size_t cap = 1;
    while (cap < 2 * (size_t)g->n_nodes + 2) cap <<= 1;
    int *slots = malloc(cap * sizeof *slots);
    int *epoch_of = malloc((size_t)g->n_nodes * sizeof *epoch_of);
    if (!map || !slots || !epoch_of) {
        free(map);
        free(slots);
        free(epoch_of);
        return 0;
    }
    (void)c;
    for (int v = 0; v < g->n_vals; v++) map[v] = v;
    for (size_t i = 0; i < cap; i++) slots[i] = -1;
    int epoch = 0, merged = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        em_gnode *nd = &g->nodes[n];
        if (nd->dead) continue;
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] >= 0) nd->in[i] = map[nd->in[i]];
        epoch_of[n] = epoch;
        /* a write starts a new epoch: reads on either side of it may differ */
        if (em_gnode_writes(nd)) {
            epoch++;
            continue;
        }
        if (nd->n_out == 0) continue;
        size_t h = (size_t)call_hash(nd, epoch) & (cap - 1);
        int found = -1;
        while (slots[h] >= 0) {
            const em_gnode *o = &g->nodes[slots[h]];
            if (epoch_of[slots[h]] == epoch && same_call(o, nd)) {
                found = slots[h];
                break;
            }
            h = (h + 1) & (cap - 1);
        }
        if (found < 0) {
            slots[h] = n;
            continue;
        }
        for (int o = 0; o < nd->n_out; o++) map[nd->out0 + o] = g->nodes[found].out0 + o;
        nd->dead = true;
        merged++;
    }
    for (int i = 0; i < g->n_outputs; i++) g->outputs[i] = map[g->outputs[i]];
    free(map);
    free(slots);
    free(epoch_of);
    return merged;
}

int em_pass_constants(em_graph *g) {
    /* a value is constant when it only depends on creation ops, and nothing writes into its
     * storage (writes go through views: follow them to the value that owns the memory) */
    int *root = malloc((size_t)g->n_vals * sizeof *root);
    bool *written = calloc((size_t)g->n_vals + 1, sizeof *written);
    bool *konst = calloc((size_t)g->n_vals + 1, sizeof *konst);
    int count = 0;
    for (int n = 0; n < g->n_nodes; n++) g->nodes[n].constant = false;
    if (!root || !written || !konst) goto done;
    for (int v = 0; v < g->n_vals; v++) {
        root[v] = v;
        /* a tensor made during the trace and held by the graph alone (em_from_host scalars,
         * rope tables) cannot be written by anyone else: a constant */
        const em_gval *gv = &g->vals[v];
        konst[v] = gv->kind == EM_GV_CAPTURED && atomic_load(&gv->t->refcount) == 1 &&
                   gv->t->storage && atomic_load(&gv->t->storage->refcount) == 1;
    }
    for (int n = 0; n < g->n_nodes; n++) {
        const em_gnode *nd = &g->nodes[n];
        if (nd->dead) continue;
        if (em_op_get(nd->op)->kind == EM_OPK_VIEW)
            for (int o = 0; o < nd->n_out; o++) root[nd->out0 + o] = root[nd->in[0]];
        if (em_gnode_writes(nd)) written[root[nd->in[0]]] = true;
    }
    for (int n = 0; n < g->n_nodes; n++) {
        const em_gnode *nd = &g->nodes[n];
        if (nd->dead || em_gnode_writes(nd) || nd->n_out == 0) continue;
        bool k = true;
        int present = 0;
        for (int i = 0; i < nd->n_in && k; i++) {
            if (nd->in[i] < 0) continue;
            present++;
            k = konst[nd->in[i]] && !written[root[nd->in[i]]];
        }
        if (!k || (!present && em_op_get(nd->op)->kind != EM_OPK_CREATE)) continue;
        bool w = false;
        for (int o = 0; o < nd->n_out; o++) w |= written[root[nd->out0 + o]];
        if (w) continue;
        g->nodes[n].constant = true;
        count++;
        for (int o = 0; o < nd->n_out; o++) konst[nd->out0 + o] = true;
    }
done:
    free(root);
    free(written);
    free(konst);
    return count;
}
