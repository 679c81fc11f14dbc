/* A short eager example: a two-layer MLP on the CPU, with the first error checked once. */
#include <stdio.h>

#include <ember/ember.h>

int main(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    em_tensor *x = em_randn(c, EM_F32, EM_SHAPE(4, 64), 1, 0.0, 1.0);   /* [batch, in] */
    em_tensor *w1 = em_randn(c, EM_F32, EM_SHAPE(128, 64), 2, 0.0, 0.1); /* Hub layout [out, in] */
    em_tensor *w2 = em_randn(c, EM_F32, EM_SHAPE(10, 128), 3, 0.0, 0.1);
    em_tensor *h = em_gelu(c, em_linear(c, x, w1, NULL), false);
    em_tensor *p = em_softmax(c, em_linear(c, h, w2, NULL), -1);
    em_tensor *best = em_argmax(c, p, -1, false);
    int64_t cls[4];
    if (em_to_host(c, best, cls, sizeof cls) != EM_OK) { /* one check for the whole chain */
        fprintf(stderr, "%s\n", em_ctx_error(c)->message);
        em_ctx_free(c);
        return 1;
    }
    printf("predicted classes: %lld %lld %lld %lld\n", (long long)cls[0], (long long)cls[1],
           (long long)cls[2], (long long)cls[3]);
    /* a mistake is reported where it happens, naming the op, shapes and device */
    if (!em_matmul(c, x, w1)) printf("as expected: %s\n", em_ctx_error(c)->message);
    em_scope_pop(c);
    em_ctx_free(c);
    return 0;
}
