/* Helpers of the kernel-hub tests (test_kernel_hub.c, test_kernel_hub_pjrt.c): shell commands
 * that lay out package copies, a scratch folder, the resolution trace. */
#ifndef EMBER_KHUB_TEST_H
#define EMBER_KHUB_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/kernels.h"
#include "harness.h"

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static int sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* Makes the scratch folder tmp (/tmp/<prefix>-XXXXXX) once; false when it cannot. */
static inline bool khub_tmp(char *tmp, size_t n, const char *prefix) {
    if (tmp[0]) return true;
    snprintf(tmp, n, "/tmp/%s-XXXXXX", prefix);
    return mkdtemp(tmp) != NULL;
}

/* The resolution trace of spec (printed to stderr) for target (NULL: any), with the lock file
 * `lock` (NULL: none). */
static inline char *explain_for(em_ctx *c, const char *spec, const char *lock, const char *target,
                                em_status *st) {
    em_kernels_options o = em_kernels_default_options();
    o.lock_path = lock ? lock : "";
    o.target = target;
    char *text = NULL;
    *st = em_kernels_explain(c, spec, &o, &text);
    if (text) fprintf(stderr, "%s", text);
    return text;
}

#define HAS(text, s) CHECK_MSG((text) && strstr((text), (s)), "missing: %s", (s))

#endif
