/* Run-time CPU feature detection and the kernel level chosen from it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "core/cpu_count.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

static em_cpu_features feats;
static em_cpu_isa isa;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1UL << 14)
#endif
#endif

#if defined(__x86_64__)
/*
 * AMX's tile data is a dynamically enabled state on Linux: a process must ask for it
 * (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, feature 18) before its first tile instruction,
 * which otherwise faults. The request is process-wide and made once, here, and only on a CPU
 * whose CPUID reports AMX-TILE and AMX-BF16 and whose OS enabled the tile state in XCR0.
 */
static bool amx_usable(unsigned long long xcr0) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    bool tile = (d >> 24) & 1, bf16 = (d >> 22) & 1;
    if (!tile || !bf16 || (xcr0 & (3ull << 17)) != (3ull << 17)) return false;
    const char *e = getenv("EMBER_CPU_AMX");
    if (e && !strcmp(e, "0")) return false;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}
#endif

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
        /* leaf 7 sub-leaf 1 exists only when leaf 7 sub-leaf 0 says so (eax = max sub-leaf) */
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && a >= 1 &&
            __get_cpuid_count(7, 1, &a, &b, &c, &d))
            feats.avx512bf16 = zmm && ((a >> 5) & 1);
        if (!ymm) feats.fma = feats.f16c = false;
        feats.amx_bf16 = zmm && amx_usable(xcr0);
    }
    isa = EM_ISA_GENERIC;
    if (feats.avx2 && feats.fma && feats.f16c) isa = EM_ISA_AVX2;
    if (isa == EM_ISA_AVX2 && feats.avx512f && feats.avx512bw && feats.avx512vl &&
        feats.avx512dq)
        isa = EM_ISA_AVX512;
#elif defined(__aarch64__)
    feats.neon = true; /* Advanced SIMD is part of the aarch64 baseline */
    feats.neon_bf16 = (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
    isa = EM_ISA_NEON;
#else
    isa = EM_ISA_GENERIC;
#endif
    feats.physical_cores = em_cpu_physical_cores();

    /* EMBER_CPU_LEVEL only lowers the choice: asking for a set the CPU lacks (or another
     * architecture's) keeps the detected one, except that "generic" is always honoured. */
    const char *e = getenv("EMBER_CPU_LEVEL");
    if (e && *e) {
        em_cpu_isa want = EM_ISA_COUNT;
        for (int i = 0; i < EM_ISA_COUNT; i++)
            if (!strcmp(e, em_cpu_isa_name((em_cpu_isa)i))) want = (em_cpu_isa)i;
        if (want == EM_ISA_GENERIC || (want == EM_ISA_AVX2 && isa == EM_ISA_AVX512))
            isa = want;
        else if (want == EM_ISA_COUNT)
            fprintf(stderr, "ember: EMBER_CPU_LEVEL=%s is not one of generic, avx2, avx512, neon; "
                            "using %s\n", e, em_cpu_isa_name(isa));
    }
}

const em_cpu_features *em_cpu_features_get(void) {
    pthread_once(&once, detect);
    return &feats;
}

em_cpu_isa em_cpu_isa_get(void) {
    pthread_once(&once, detect);
    return isa;
}

const char *em_cpu_isa_name(em_cpu_isa i) {
    switch (i) {
    case EM_ISA_GENERIC: return "generic";
    case EM_ISA_AVX2: return "avx2";
    case EM_ISA_AVX512: return "avx512";
    case EM_ISA_NEON: return "neon";
    default: return "?";
    }
}

bool em_cpu_bf16_dot(void) {
    em_cpu_isa i = em_cpu_isa_get();
    return (i == EM_ISA_AVX512 && feats.avx512bf16) || (i == EM_ISA_NEON && feats.neon_bf16);
}

bool em_cpu_amx(void) { return em_cpu_isa_get() == EM_ISA_AVX512 && feats.amx_bf16; }

void em_cpu_isa_fill(void *table, const em_isa_fill_fn fills[EM_ISA_COUNT]) {
    fills[EM_ISA_GENERIC](table);
    em_cpu_isa i = em_cpu_isa_get();
    while (i != EM_ISA_GENERIC && !fills[i]) i = i == EM_ISA_AVX512 ? EM_ISA_AVX2 : EM_ISA_GENERIC;
    if (i != EM_ISA_GENERIC) fills[i](table);
}

void em_cpu_features_str(char *buf, size_t n) {
    const em_cpu_features *f = em_cpu_features_get();
    snprintf(buf, n, "%s%s%s%s%s%s%s%s%s%s%s[kernels: %s%s]", f->avx2 ? "avx2 " : "",
             f->fma ? "fma " : "", f->f16c ? "f16c " : "", f->avx512f ? "avx512f " : "",
             f->avx512bw ? "avx512bw " : "", f->avx512vl ? "avx512vl " : "",
             f->avx512bf16 ? "avx512bf16 " : "", f->avx512vnni ? "avx512vnni " : "",
             f->amx_bf16 ? "amx-bf16 " : "", f->neon ? "neon " : "",
             f->neon_bf16 ? "bf16 " : "",
             em_cpu_isa_name(em_cpu_isa_get()), em_cpu_amx() ? "+amx" : "");
}
