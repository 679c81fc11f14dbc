/* The graph IR's own helpers (core/graph.h). */
#include <stdlib.h>
#include <string.h>

#include "core/graph.h"

void em_graph_free(em_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_vals; i++)
        if (g->vals[i].kind == EM_GV_CAPTURED) em_tensor_release(g->vals[i].t);
    free(g->vals);
    free(g->nodes);
    free(g->outputs);
    free(g->shard_dim);
    memset(g, 0, sizeof *g);
}

void em_graph_count_uses(em_graph *g) {
    for (int i = 0; i < g->n_vals; i++) g->vals[i].n_uses = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        const em_gnode *nd = &g->nodes[n];
        if (nd->dead) continue;
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] >= 0) g->vals[nd->in[i]].n_uses++;
    }
    for (int i = 0; i < g->n_outputs; i++) g->vals[g->outputs[i]].n_uses++;
}
