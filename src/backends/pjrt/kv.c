/*
 * The process group's key-value store as PJRT_Client_Create's kv_get / kv_put callbacks: what a
 * multi-process plugin (CUDA, TPU) uses to exchange its topology and communicator ids between
 * processes, as jax.distributed.initialize provides. The store is core's offer (core/group.h),
 * made by em_dist_init; the plugin may call from any thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"

enum { CODE_DEADLINE_EXCEEDED = 4, CODE_NOT_FOUND = 5, CODE_UNAVAILABLE = 14 };

static PJRT_Error *fail(PJRT_CallbackError *cb, em_status s, const char *msg) {
    int code = s == EM_ERR_NOT_FOUND ? CODE_NOT_FOUND
               : s == EM_ERR_IO      ? CODE_UNAVAILABLE
                                     : CODE_DEADLINE_EXCEEDED;
    return cb && *cb ? (*cb)(code, msg, strlen(msg)) : NULL;
}

/* The key as a C string (PJRT gives it with a size). */
static char *key_of(const char *k, size_t n) {
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, k, n);
        s[n] = 0;
    }
    return s;
}

static void value_free(char *v) { free(v); }

PJRT_Error *pj_kv_get(PJRT_KeyValueGetCallback_Args *a) {
    const em_group_kv *kv = a->user_arg;
    char err[512] = "out of memory", *key = key_of(a->key, a->key_size);
    void *v = NULL;
    size_t n = 0;
    em_status s = key ? kv->get(kv->user, key, a->timeout_in_ms / 1000.0, &v, &n, err, sizeof err)
                      : EM_ERR_OOM;
    free(key);
    if (s) return fail(a->callback_error, s, err);
    a->value = v;
    a->value_size = n;
    a->value_deleter_callback = value_free;
    return NULL;
}

PJRT_Error *pj_kv_put(PJRT_KeyValuePutCallback_Args *a) {
    const em_group_kv *kv = a->user_arg;
    char err[512] = "out of memory", *key = key_of(a->key, a->key_size);
    em_status s = key ? kv->put(kv->user, key, a->value, a->value_size, err, sizeof err)
                      : EM_ERR_OOM;
    free(key);
    return s ? fail(a->callback_error, s, err) : NULL;
}
