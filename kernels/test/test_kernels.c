/*
 * A test kernel package (tests/test_kernel_hub.c), written against ember/kernel_abi.h alone:
 *   silu f32 (all modes) and add f32 (inference and compile), whose supports() declines calls
 *   of fewer than 16 elements and strided inputs, so Ember falls back per call;
 *   neg f32, ragged_dot f32 and sdpa f32, deliberately wrong (neg returns its input, the others
 *   zeros), which the load-time self-test disables.
 * ember_test_calls(name) counts the runs of each, so the test sees which implementation ran.
 * Built with EMBER_TEST_ABI=2 it claims another ABI; with EMBER_TEST_NO_GET it lacks the table.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "ember/kernel_abi.h"
#include "kernel_util.h"

#ifndef EMBER_TEST_ABI
#define EMBER_TEST_ABI EMBER_KERNEL_ABI_VERSION
#endif

static atomic_int n_silu, n_add, n_neg;
static _Atomic(const char *) last_level; /* the caller's cpu_level in the last supports() */

EMBER_KERNEL_EXPORT const char *ember_test_cpu_level(void) { return atomic_load(&last_level); }

EMBER_KERNEL_EXPORT int ember_test_calls(const char *name) {
    if (!strcmp(name, "silu")) return atomic_load(&n_silu);
    if (!strcmp(name, "add")) return atomic_load(&n_add);
    if (!strcmp(name, "neg")) return atomic_load(&n_neg);
    return -1;
}

static int supports_big_contiguous(const ember_kernel_call *k) {
    atomic_store(&last_level, kabi_cpu_level(k));
    if (kabi_numel(&k->out[0]) < 16) return 0;
    for (int i = 0; i < k->n_in; i++)
        if (k->in[i].dtype != EMBER_KDT_F32 || !kabi_contiguous(&k->in[i]) ||
            kabi_numel(&k->in[i]) != kabi_numel(&k->out[0]))
            return 0;
    return 1;
}

static int run_silu(const ember_kernel_call *k, char *err, size_t err_n) {
    (void)err;
    (void)err_n;
    const float *x = k->in[0].data;
    float *y = k->out[0].data;
    for (int64_t i = 0, n = kabi_numel(&k->out[0]); i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
    atomic_fetch_add(&n_silu, 1);
    return 0;
}

static int run_add(const ember_kernel_call *k, char *err, size_t err_n) {
    (void)err;
    (void)err_n;
    const float *a = k->in[0].data, *b = k->in[1].data;
    float *y = k->out[0].data;
    for (int64_t i = 0, n = kabi_numel(&k->out[0]); i < n; i++) y[i] = a[i] + b[i];
    atomic_fetch_add(&n_add, 1);
    return 0;
}

static int run_neg_wrong(const ember_kernel_call *k, char *err, size_t err_n) {
    (void)err;
    (void)err_n;
    if (!kabi_contiguous(&k->in[0])) return 1;
    memcpy(k->out[0].data, k->in[0].data, (size_t)kabi_numel(&k->out[0]) * sizeof(float));
    atomic_fetch_add(&n_neg, 1);
    return 0;
}

static int run_zeros(const ember_kernel_call *k, char *err, size_t err_n) {
    (void)err;
    (void)err_n;
    memset(k->out[0].data, 0, (size_t)kabi_numel(&k->out[0]) * sizeof(float));
    return 0;
}

static const ember_kernel_impl impls[] = {
    KABI_IMPL("silu", "silu_test", EMBER_KDT_BIT(EMBER_KDT_F32), 10, supports_big_contiguous, run_silu),
    KABI_IMPL("add", "add_test", EMBER_KDT_BIT(EMBER_KDT_F32), 10, supports_big_contiguous, run_add),
    KABI_IMPL("neg", "neg_wrong", EMBER_KDT_BIT(EMBER_KDT_F32), 10, NULL, run_neg_wrong),
    KABI_IMPL("ragged_dot", "ragged_dot_wrong", EMBER_KDT_BIT(EMBER_KDT_F32), 10, NULL, run_zeros),
    KABI_IMPL("sdpa", "sdpa_wrong", EMBER_KDT_BIT(EMBER_KDT_F32), 10, NULL, run_zeros),
};

static const ember_kernel_library lib = {EMBER_TEST_ABI, sizeof(ember_kernel_library),
                                         "ember-test-kernels", 5, impls};

EMBER_KERNEL_EXPORT const uint32_t ember_kernel_abi_version = EMBER_TEST_ABI;

#ifndef EMBER_TEST_NO_GET
EMBER_KERNEL_EXPORT const ember_kernel_library *ember_kernel_library_get(void) { return &lib; }
#else
EMBER_KERNEL_EXPORT const ember_kernel_library *ember_test_unused(void) { return &lib; }
#endif
