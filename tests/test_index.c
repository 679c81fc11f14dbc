/* Indexing kernels on sizes large enough to be split across the thread pool (the torch fixtures in
 * tests/fixtures/ops/index.* are small). Inputs are built so that the expected result follows
 * from the construction: arange-valued data, permutations, histograms counted by a plain loop. */
#include <stdlib.h>

#include "ember/ember.h"
#include "harness.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int64_t rnd(int64_t n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (int64_t)(rng % (uint64_t)n);
}

/* x[r][c] = r * 1000 + c (exact in f32) */
static em_tensor *arange2(em_ctx *c, int64_t rows, int64_t cols) {
    float *v = malloc((size_t)(rows * cols) * sizeof *v);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++) v[r * cols + k] = (float)(r * 1000 + k);
    em_tensor *t = em_from_host(c, EM_F32, EM_SHAPE(rows, cols), v);
    free(v);
    return t;
}

static em_tensor *ids(em_ctx *c, int64_t n, int64_t hi, int64_t **out) {
    int64_t *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = rnd(hi);
    em_tensor *t = em_from_host(c, EM_I64, EM_SHAPE(n), v);
    *out = v;
    return t;
}

static float *read_f32(em_ctx *c, em_tensor *t) {
    float *v = malloc((size_t)em_tensor_numel(t) * sizeof *v);
    if (v && em_to_host(c, t, v, (size_t)em_tensor_numel(t) * sizeof *v) != EM_OK) {
        free(v);
        return NULL;
    }
    return v;
}

static int64_t *read_i64(em_ctx *c, em_tensor *t) {
    int64_t *v = malloc((size_t)em_tensor_numel(t) * sizeof *v);
    if (v && em_to_host(c, t, v, (size_t)em_tensor_numel(t) * sizeof *v) != EM_OK) {
        free(v);
        return NULL;
    }
    return v;
}

static void test_index_select_rows_and_columns(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    int64_t *iv;
    em_tensor *x = arange2(c, 3000, 700);
    em_tensor *idx = ids(c, 5000, 3000, &iv);
    float *o = read_f32(c, em_index_select(c, x, 0, idx));
    CHECK(o != NULL);
    int bad = 0;
    for (int64_t j = 0; o && j < 5000; j++)
        for (int64_t k = 0; k < 700; k++) bad += o[j * 700 + k] != (float)(iv[j] * 1000 + k);
    CHECK_MSG(bad == 0, "%d wrong rows elements", bad);
    free(o);
    free(iv);
    /* along the last dim: every element has its own index value, runs split in blocks */
    em_tensor *y = arange2(c, 40, 900);
    idx = ids(c, 9000, 900, &iv);
    o = read_f32(c, em_index_select(c, y, 1, idx));
    bad = 0;
    for (int64_t r = 0; o && r < 40; r++)
        for (int64_t j = 0; j < 9000; j++) bad += o[r * 9000 + j] != (float)(r * 1000 + iv[j]);
    CHECK_MSG(bad == 0, "%d wrong column elements", bad);
    free(o);
    free(iv);
    em_scope_pop(c);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

static void test_gather_and_take_along_dim(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    em_tensor *x = arange2(c, 6, 9000);
    int64_t n = 6 * 10000;
    int64_t *iv = malloc((size_t)n * sizeof *iv);
    for (int64_t i = 0; i < n; i++) iv[i] = rnd(9000);
    em_tensor *idx = em_from_host(c, EM_I64, EM_SHAPE(6, 10000), iv);
    float *o = read_f32(c, em_gather(c, x, 1, idx));
    int bad = 0;
    for (int64_t r = 0; o && r < 6; r++)
        for (int64_t k = 0; k < 10000; k++)
            bad += o[r * 10000 + k] != (float)(r * 1000 + iv[r * 10000 + k]);
    CHECK_MSG(bad == 0, "gather: %d wrong", bad);
    free(o);
    /* negative values count from the end; the input broadcasts over the index's rows */
    for (int64_t i = 0; i < n; i++) iv[i] -= 9000;
    em_tensor *nidx = em_from_host(c, EM_I64, EM_SHAPE(6, 10000), iv);
    o = read_f32(c, em_take_along_dim(c, em_slice(c, x, 0, 2, 3, 1), nidx, 1));
    bad = 0;
    for (int64_t r = 0; o && r < 6; r++)
        for (int64_t k = 0; k < 10000; k++)
            bad += o[r * 10000 + k] != (float)(2 * 1000 + iv[r * 10000 + k] + 9000);
    CHECK_MSG(bad == 0, "take_along_dim: %d wrong", bad);
    free(o);
    free(iv);
    /* an out-of-range value deep inside a parallel loop is reported with its position */
    int64_t *bv = calloc(6 * 10000, sizeof *bv);
    bv[4 * 10000 + 7777] = 9000;
    bv[5 * 10000 + 3] = -1;
    CHECK(em_gather(c, x, 1, em_from_host(c, EM_I64, EM_SHAPE(6, 10000), bv)) == NULL);
    CHECK_ERR(c, EM_ERR_INDEX, "gather", "index 9000", "[4,7777]", "size 9000");
    free(bv);
    em_scope_pop(c);
    em_ctx_free(c);
}

static void test_scatter_add_and_index_add_histograms(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    /* counts of 200000 random bins along dim 1 of an [8, 300] i64 zero tensor */
    int64_t rows = 8, bins = 300, n = 25000;
    int64_t *iv = malloc((size_t)(rows * n) * sizeof *iv);
    int64_t *want = calloc((size_t)(rows * bins), sizeof *want);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < n; k++) want[r * bins + (iv[r * n + k] = rnd(bins))]++;
    em_tensor *idx = em_from_host(c, EM_I64, EM_SHAPE(rows, n), iv);
    em_tensor *one = em_full(c, EM_I64, EM_SHAPE(rows, n), 1);
    int64_t *o = read_i64(c, em_scatter_add(c, em_zeros(c, EM_I64, EM_SHAPE(rows, bins)), 1, idx,
                                            one));
    int bad = 0;
    for (int64_t i = 0; o && i < rows * bins; i++) bad += o[i] != want[i];
    CHECK_MSG(o && bad == 0, "scatter_add: %d wrong", bad);
    free(o);
    /* index_add of ones rows: row v of the result counts the index values equal to v */
    int64_t *jv;
    em_tensor *j = ids(c, 20000, 500, &jv);
    int64_t *cnt = calloc(500, sizeof *cnt);
    for (int64_t i = 0; i < 20000; i++) cnt[jv[i]]++;
    float *f = read_f32(c, em_index_add(c, em_zeros(c, EM_F32, EM_SHAPE(500, 64)), 0, j,
                                        em_full(c, EM_F32, EM_SHAPE(20000, 64), 1), 1.0));
    bad = 0;
    for (int64_t v = 0; f && v < 500; v++)
        for (int64_t k = 0; k < 64; k++) bad += f[v * 64 + k] != (float)cnt[v];
    CHECK_MSG(f && bad == 0, "index_add: %d wrong", bad);
    free(f);
    free(cnt);
    free(jv);
    free(iv);
    free(want);
    em_scope_pop(c);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

/* rows of permutations: sorted values are 0..n-1, indices the inverse permutation */
static void test_sort_and_topk_permutations(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    int64_t rows = 64, n = 5000, k = 40;
    float *v = malloc((size_t)(rows * n) * sizeof *v);
    int64_t *inv = malloc((size_t)(rows * n) * sizeof *inv);
    for (int64_t r = 0; r < rows; r++) {
        float *p = v + r * n;
        for (int64_t i = 0; i < n; i++) p[i] = (float)i;
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t s = rnd(i + 1);
            float t = p[i];
            p[i] = p[s];
            p[s] = t;
        }
        for (int64_t i = 0; i < n; i++) inv[r * n + (int64_t)p[i]] = i;
    }
    em_tensor *x = em_from_host(c, EM_F32, EM_SHAPE(rows, n), v);
    em_tensor *si, *ti, *bi;
    float *sv = read_f32(c, em_sort(c, x, 1, false, &si));
    int64_t *sx = read_i64(c, si);
    float *tv = read_f32(c, em_topk(c, x, k, -1, true, true, &ti)); /* heap path */
    int64_t *tx = read_i64(c, ti);
    float *bv = read_f32(c, em_topk(c, x, 500, -1, false, true, &bi)); /* nth_element path */
    int64_t *bx = read_i64(c, bi);
    CHECK(sv && sx && tv && tx && bv && bx);
    int bad = 0;
    for (int64_t r = 0; sv && sx && r < rows; r++)
        for (int64_t i = 0; i < n; i++)
            bad += sv[r * n + i] != (float)i || sx[r * n + i] != inv[r * n + i];
    CHECK_MSG(bad == 0, "sort: %d wrong", bad);
    bad = 0;
    for (int64_t r = 0; tv && tx && r < rows; r++)
        for (int64_t i = 0; i < k; i++)
            bad += tv[r * k + i] != (float)(n - 1 - i) || tx[r * k + i] != inv[r * n + n - 1 - i];
    CHECK_MSG(bad == 0, "topk largest: %d wrong", bad);
    bad = 0;
    for (int64_t r = 0; bv && bx && r < rows; r++)
        for (int64_t i = 0; i < 500; i++)
            bad += bv[r * 500 + i] != (float)i || bx[r * 500 + i] != inv[r * n + i];
    CHECK_MSG(bad == 0, "topk smallest: %d wrong", bad);
    free(sv), free(sx), free(tv), free(tx), free(bv), free(bx);
    /* sorting along dim 0 of the transposed rows: a strided read of every row */
    float *cv = read_f32(c, em_sort(c, em_transpose(c, x, 0, 1), 0, true, NULL));
    bad = 0;
    for (int64_t i = 0; cv && i < n; i++)
        for (int64_t r = 0; r < rows; r++) bad += cv[i * rows + r] != (float)(n - 1 - i);
    CHECK_MSG(cv && bad == 0, "sort dim 0: %d wrong", bad);
    free(cv);
    free(v);
    free(inv);
    em_scope_pop(c);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

static void test_cat_stack_repeat_large(void) {
    em_ctx *c = em_ctx_create();
    em_scope_push(c);
    em_tensor *a = arange2(c, 2000, 300), *b = arange2(c, 2000, 500);
    em_tensor *ab[2] = {a, b};
    float *o = read_f32(c, em_cat(c, ab, 2, 1));
    int bad = 0;
    for (int64_t r = 0; o && r < 2000; r++)
        for (int64_t k = 0; k < 800; k++)
            bad += o[r * 800 + k] != (float)(r * 1000 + (k < 300 ? k : k - 300));
    CHECK_MSG(o && bad == 0, "cat: %d wrong", bad);
    free(o);
    /* transposed inputs take the strided copy */
    em_tensor *t[2] = {em_transpose(c, a, 0, 1), em_transpose(c, a, 0, 1)};
    o = read_f32(c, em_cat(c, t, 2, 0));
    bad = 0;
    for (int64_t i = 0; o && i < 600; i++)
        for (int64_t r = 0; r < 2000; r++) bad += o[i * 2000 + r] != (float)(r * 1000 + i % 300);
    CHECK_MSG(o && bad == 0, "cat transposed: %d wrong", bad);
    free(o);
    o = read_f32(c, em_stack(c, t, 2, 2));
    bad = 0;
    for (int64_t i = 0; o && i < 300; i++)
        for (int64_t r = 0; r < 2000; r++)
            for (int s = 0; s < 2; s++) bad += o[(i * 2000 + r) * 2 + s] != (float)(r * 1000 + i);
    CHECK_MSG(o && bad == 0, "stack: %d wrong", bad);
    free(o);
    o = read_f32(c, em_repeat_interleave(c, a, 3, 0));
    bad = 0;
    for (int64_t r = 0; o && r < 6000; r++)
        for (int64_t k = 0; k < 300; k++) bad += o[r * 300 + k] != (float)(r / 3 * 1000 + k);
    CHECK_MSG(o && bad == 0, "repeat_interleave: %d wrong", bad);
    free(o);
    em_scope_pop(c);
    CHECK(em_ctx_status(c) == EM_OK);
    em_ctx_free(c);
}

int main(int argc, char **argv) {
    em_set_num_threads(4); /* split work even on small machines */
    static const em_test_case tests[] = {
        T(test_index_select_rows_and_columns), T(test_gather_and_take_along_dim),
        T(test_scatter_add_and_index_add_histograms), T(test_sort_and_topk_permutations),
        T(test_cat_stack_repeat_large),
    };
    return em_test_run(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
}
