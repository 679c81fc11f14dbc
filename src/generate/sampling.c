/* Token selection in transformers' order: repetition penalty, then (when sampling)
 * temperature, top-k, top-p, min-p, and a multinomial draw. */
#include "generate/sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void em_rng_seed(em_rng *r, uint64_t seed) { r->state = seed * 0x9e3779b97f4a7c15ull + 1; }

double em_rng_uniform(em_rng *r) {
    uint64_t x = (r->state += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

/* descending by value, then ascending index (a total order: stable results) */
static int by_value_desc(const void *a, const void *b, void *base) {
    const float *v = base;
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = v[i], y = v[j];
    if (x > y) return -1;
    if (x < y) return 1;
    return (i > j) - (i < j);
}

/* The k-th largest of v[0..n) (1-based k), by quickselect on a scratch copy. */
static float kth_largest(const float *v, int64_t n, int64_t k, float *tmp) {
    memcpy(tmp, v, (size_t)n * sizeof *tmp);
    int64_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float pivot = tmp[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (tmp[i] > pivot) i++;
            while (tmp[j] < pivot) j--;
            if (i <= j) {
                float t = tmp[i];
                tmp[i++] = tmp[j];
                tmp[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
    return tmp[want];
}

int64_t em_sample_next(float *logits, int64_t n, const int64_t *seen, int64_t n_seen,
                       const em_generate_params *p, em_rng *rng, float *scratch, int32_t *order) {
    if (p->repetition_penalty > 0 && p->repetition_penalty != 1.0) {
        float pen = (float)p->repetition_penalty;
        /* each distinct id once, from the original scores (as gather/scatter does) */
        for (int64_t i = 0; i < n_seen; i++) {
            int64_t id = seen[i];
            if (id < 0 || id >= n) continue;
            bool dup = false;
            for (int64_t j = 0; j < i && !dup; j++) dup = seen[j] == id;
            if (dup) continue;
            float s = logits[id];
            logits[id] = s < 0 ? s * pen : s / pen;
        }
    }
    if (!p->do_sample) {
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    float *probs = scratch;
    if (p->temperature > 0 && p->temperature != 1.0)
        for (int64_t i = 0; i < n; i++) logits[i] = (float)(logits[i] / p->temperature);
    if (p->top_k > 0 && p->top_k < n) {
        /* the k-th largest value; ties at the threshold are kept, as torch.topk's >= mask */
        float kth = kth_largest(logits, n, p->top_k, probs);
        for (int64_t i = 0; i < n; i++)
            if (logits[i] < kth) logits[i] = -INFINITY;
    }
    if (p->top_p < 1.0 || p->min_p > 0) {
        float m = -INFINITY;
        for (int64_t i = 0; i < n; i++) m = logits[i] > m ? logits[i] : m;
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += probs[i] = expf(logits[i] - m);
        for (int64_t i = 0; i < n; i++) probs[i] = (float)(probs[i] / sum);
        if (p->top_p < 1.0) {
            /* drop the smallest tokens whose cumulative mass <= 1 - top_p (only tokens still
             * in play need sorting: after top-k that is a handful) */
            int64_t live = 0;
            for (int64_t i = 0; i < n; i++)
                if (probs[i] > 0) order[live++] = (int32_t)i;
            qsort_r(order, (size_t)live, sizeof *order, by_value_desc, probs);
            double cum = 0;
            for (int64_t r = live - 1; r >= 1; r--) { /* keep at least one token */
                cum += probs[order[r]];
                if (cum <= 1.0 - p->top_p) logits[order[r]] = -INFINITY;
                else break;
            }
        }
        if (p->min_p > 0) {
            float top = 0;
            for (int64_t i = 0; i < n; i++) top = probs[i] > top ? probs[i] : top;
            for (int64_t i = 0; i < n; i++)
                if (probs[i] < p->min_p * top && probs[i] != top) logits[i] = -INFINITY;
        }
    }
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = logits[i] > m ? logits[i] : m;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += probs[i] = logits[i] == -INFINITY ? 0 : expf(logits[i] - m);
    double u = em_rng_uniform(rng) * sum, acc = 0;
    int64_t last = 0;
    for (int64_t i = 0; i < n; i++) {
        if (probs[i] <= 0) continue;
        last = i;
        acc += probs[i];
        if (u < acc) return i;
    }
    return last;
}
