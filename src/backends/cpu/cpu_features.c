/* Run-time CPU feature detection and the kernel level chosen from it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/cpu.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

static em_cpu_features feats;
static int level;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Physical cores: distinct (package, core) pairs in sysfs; logical CPUs as a fallback. */
static int count_physical_cores(void) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 1) ncpu = 1;
    int seen = 0;
    long keys[1024];
    for (long i = 0; i < ncpu && i < 1024; i++) {
        char path[128];
        long core = -1, pkg = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/core_id", i);
        FILE *f = fopen(path, "r");
        if (!f) return (int)ncpu;
        if (fscanf(f, "%ld", &core) != 1) core = i;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/physical_package_id",
                 i);
        f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%ld", &pkg) != 1) pkg = 0;
            fclose(f);
        }
        long key = pkg * 100000 + core;
        bool dup = false;
        for (int j = 0; j < seen; j++) dup |= keys[j] == key;
        if (!dup) keys[seen++] = key;
    }
    return seen > 0 ? seen : (int)ncpu;
}

static void detect(void) {
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        feats.fma = (c >> 12) & 1;
        feats.f16c = (c >> 29) & 1;
        bool osxsave = (c >> 27) & 1;
        unsigned long long xcr0 = 0;
        if (osxsave) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            xcr0 = ((unsigned long long)hi << 32) | lo;
        }
        bool ymm = (xcr0 & 6) == 6, zmm = (xcr0 & 0xe6) == 0xe6;
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
            feats.avx2 = ymm && ((b >> 5) & 1);
            feats.avx512f = zmm && ((b >> 16) & 1);
            feats.avx512dq = zmm && ((b >> 17) & 1);
            feats.avx512bw = zmm && ((b >> 30) & 1);
            feats.avx512vl = zmm && ((b >> 31) & 1);
            feats.avx512vnni = zmm && ((c >> 11) & 1);
        }
        if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) feats.avx512bf16 = zmm && ((a >> 5) & 1);
        if (!ymm) feats.fma = feats.f16c = false;
    }
#elif defined(__aarch64__)
    feats.neon = true;
#endif
    feats.physical_cores = count_physical_cores();

    level = 0;
    if (feats.avx2 && feats.fma && feats.f16c) level = 1;
    if (level == 1 && feats.avx512f && feats.avx512bw && feats.avx512vl && feats.avx512dq)
        level = 2;
    const char *e = getenv("EMBER_CPU_LEVEL");
    if (e) {
        int want = !strcmp(e, "generic") ? 0 : !strcmp(e, "avx2") ? 1 : !strcmp(e, "avx512") ? 2 : 9;
        if (want < level) level = want;
    }
}

const em_cpu_features *em_cpu_features_get(void) {
    pthread_once(&once, detect);
    return &feats;
}

int em_cpu_level(void) {
    pthread_once(&once, detect);
    return level;
}

void em_cpu_features_str(char *buf, size_t n) {
    const em_cpu_features *f = em_cpu_features_get();
    snprintf(buf, n, "%s%s%s%s%s%s%s%s%s%s", f->avx2 ? "avx2 " : "", f->fma ? "fma " : "",
             f->f16c ? "f16c " : "", f->avx512f ? "avx512f " : "", f->avx512bw ? "avx512bw " : "",
             f->avx512vl ? "avx512vl " : "", f->avx512bf16 ? "avx512bf16 " : "",
             f->avx512vnni ? "avx512vnni " : "", f->neon ? "neon " : "",
             level == 2 ? "[kernels: avx512]" : level == 1 ? "[kernels: avx2]" : "[kernels: generic]");
}
