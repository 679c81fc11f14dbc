/*
 * The caching allocator that sits on top of each device's raw allocation.
 *
 * Sizes are rounded up to a size class (4 classes per power of two, so at most 25 % waste);
 * freed blocks go to their class's free list and are reused by the next allocation of the same
 * class. Eager code allocates and frees the same shapes over and over (a decode loop), so after
 * the first step almost every allocation is a list pop. The cache is bounded: past the limit,
 * freed blocks go back to the device.
 */
#include <stdlib.h>

#include "core/tensor_impl.h"

static int size_class(size_t n, size_t *rounded) {
    if (n <= 64) {
        *rounded = 64;
        return 0;
    }
    int lg = 63 - __builtin_clzll((unsigned long long)n); /* 2^lg <= n < 2^(lg+1) */
    size_t base = (size_t)1 << lg, quarter = base >> 2;
    size_t steps = (n - base + quarter - 1) / quarter; /* 0..4 */
    size_t r = base + steps * quarter;
    *rounded = r;
    int cls = 1 + (lg - 6) * 4 + (int)steps;
    return cls < EM_ALLOC_CLASSES ? cls : -1;
}

void em_allocator_init(em_allocator *a, int64_t cache_limit) {
    pthread_mutex_init(&a->lock, NULL);
    for (int i = 0; i < EM_ALLOC_CLASSES; i++) a->free_lists[i] = NULL;
    a->spare_blocks = NULL;
    a->in_use = a->cached = 0;
    a->cache_limit = cache_limit;
}

void *em_allocator_alloc(em_device *d, size_t nbytes, size_t *got) {
    em_allocator *a = &d->alloc;
    size_t r;
    int cls = size_class(nbytes, &r);
    if (cls < 0) return NULL;
    pthread_mutex_lock(&a->lock);
    em_alloc_block *b = a->free_lists[cls];
    if (b) {
        a->free_lists[cls] = b->next;
        b->next = a->spare_blocks;
        a->spare_blocks = b;
        a->cached -= (int64_t)r;
        a->in_use += (int64_t)r;
        void *p = b->ptr;
        pthread_mutex_unlock(&a->lock);
        *got = r;
        return p;
    }
    pthread_mutex_unlock(&a->lock);
    void *p = d->be->raw_alloc(d, r);
    if (!p) {
        /* Give the cache back and try once more before failing. */
        em_allocator_empty(d);
        p = d->be->raw_alloc(d, r);
        if (!p) return NULL;
    }
    pthread_mutex_lock(&a->lock);
    a->in_use += (int64_t)r;
    pthread_mutex_unlock(&a->lock);
    *got = r;
    return p;
}

void em_allocator_free(em_device *d, void *p, size_t got) {
    em_allocator *a = &d->alloc;
    size_t r;
    int cls = size_class(got, &r);
    pthread_mutex_lock(&a->lock);
    a->in_use -= (int64_t)got;
    if (cls >= 0 && a->cached + (int64_t)r <= a->cache_limit) {
        em_alloc_block *b = a->spare_blocks;
        if (b)
            a->spare_blocks = b->next;
        else
            b = malloc(sizeof *b);
        if (b) {
            b->ptr = p;
            b->next = a->free_lists[cls];
            a->free_lists[cls] = b;
            a->cached += (int64_t)r;
            pthread_mutex_unlock(&a->lock);
            return;
        }
    }
    pthread_mutex_unlock(&a->lock);
    d->be->raw_free(d, p, got);
}

void em_allocator_empty(em_device *d) {
    em_allocator *a = &d->alloc;
    pthread_mutex_lock(&a->lock);
    for (int cls = 0; cls < EM_ALLOC_CLASSES; cls++) {
        em_alloc_block *b = a->free_lists[cls];
        a->free_lists[cls] = NULL;
        size_t r = cls == 0 ? 64 : 0;
        if (cls > 0) {
            int lg = (cls - 1) / 4 + 6, steps = (cls - 1) % 4;
            size_t base = (size_t)1 << lg;
            r = base + (size_t)steps * (base >> 2);
        }
        while (b) {
            em_alloc_block *n = b->next;
            d->be->raw_free(d, b->ptr, r);
            a->cached -= (int64_t)r;
            b->next = a->spare_blocks;
            a->spare_blocks = b;
            b = n;
        }
    }
    em_alloc_block *s = a->spare_blocks;
    a->spare_blocks = NULL;
    pthread_mutex_unlock(&a->lock);
    while (s) {
        em_alloc_block *n = s->next;
        free(s);
        s = n;
    }
}

void em_device_empty_cache(em_device *d) {
    if (d) em_allocator_empty(d);
}

void em_device_memory_stats(const em_device *d, int64_t *in_use, int64_t *cached) {
    if (!d) return;
    em_allocator *a = (em_allocator *)&d->alloc;
    pthread_mutex_lock(&a->lock);
    if (in_use) *in_use = a->in_use;
    if (cached) *cached = a->cached;
    pthread_mutex_unlock(&a->lock);
}
