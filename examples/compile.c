/* Compile mode: the MLP of eager.c as a compiled function. The first call for a shape traces
 * and plans it; later calls run the plan; a new batch size is a new program, and
 * EMBER_LOG_COMPILES=1 says why it was compiled. */
#include <stdio.h>

#include <ember/ember.h>

typedef struct mlp {
    em_tensor *w1, *w2;
} mlp;

static int forward(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                   int n_statics, em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)statics, (void)n_statics, (void)max_out;
    const mlp *m = user;
    em_tensor *h = em_gelu(c, em_linear(c, in[0], m->w1, NULL), false);
    out[0] = em_softmax(c, em_linear(c, h, m->w2, NULL), -1);
    return out[0] ? 1 : -1;
}

int main(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    mlp m = {em_randn(c, EM_F32, EM_SHAPE(128, 64), 2, 0.0, 0.1),
             em_randn(c, EM_F32, EM_SHAPE(10, 128), 3, 0.0, 0.1)};
    em_compiled *f = em_compile(c, "mlp", forward, &m);
    for (int64_t batch = 4; batch <= 8; batch += 4)
        for (int rep = 0; rep < 3; rep++) {
            em_tensor *x = em_randn(c, EM_F32, EM_SHAPE(batch, 64), (uint64_t)rep, 0.0, 1.0);
            em_tensor *p = NULL;
            if (em_compiled_call(c, f, &x, 1, NULL, 0, &p, 1) != 1) {
                fprintf(stderr, "%s\n", em_ctx_error(c)->message);
                return 1;
            }
        }
    em_compile_stats st;
    em_compiled_stats(f, &st);
    printf("%lld calls, %lld compiles (last: %s), %d ops traced, %d kernels per call\n",
           (long long)st.calls, (long long)st.compiles, st.last_reason, st.nodes_traced,
           st.kernels);
    em_compiled_free(f);
    em_scope_pop(c);
    em_ctx_free(c);
    return 0;
}
