/* Variant names (khub.h): the grammar, and which variants this process can run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu.h"
#include "kernels_hub/khub.h"

#if defined(__x86_64__)
#define HOST_ARCH "x86_64"
#elif defined(__aarch64__)
#define HOST_ARCH "aarch64"
#else
#define HOST_ARCH "unknown"
#endif

#if defined(__linux__)
#define HOST_OS "linux"
#else
#define HOST_OS "unknown"
#endif

/* CPU features a variant may name, with what they need and their rank (wider first). */
typedef struct feature {
    const char *name, *arch, *label;
    int rank;
} feature;

static const feature features[] = {
    {"generic", NULL, "portable C", 1},
    {"avx2", "x86_64", "AVX2", 2},
    {"avx512", "x86_64", "AVX-512", 3},
    {"avx512bf16", "x86_64", "AVX-512 BF16", 4},
    {"neon", "aarch64", "NEON", 2},
    {"neonbf16", "aarch64", "NEON BF16", 3},
};

static const feature *feature_find(const char *name) {
    for (size_t i = 0; i < sizeof features / sizeof *features; i++)
        if (!strcmp(features[i].name, name)) return &features[i];
    return NULL;
}

/* What the kernels of this process run (EMBER_CPU_LEVEL may lower it): an index of features. */
static const feature *host_feature(void) {
    switch (em_cpu_isa_get()) {
    case EM_ISA_AVX2: return &features[1];
    case EM_ISA_AVX512: return &features[em_cpu_bf16_dot() ? 3 : 2];
    case EM_ISA_NEON: return &features[em_cpu_bf16_dot() ? 5 : 4];
    default: return &features[0];
    }
}

const char *khub_host_level(void) { return host_feature()->name; }

static bool host_has(const feature *f) {
    const feature *h = host_feature();
    if (!strcmp(f->name, "generic")) return true;
    if (!f->arch || strcmp(f->arch, HOST_ARCH)) return false;
    return h->rank >= f->rank;
}

static bool copy_tok(char *dst, size_t n, const char *s, size_t len) {
    if (len == 0 || len >= n) return false;
    memcpy(dst, s, len);
    dst[len] = 0;
    return true;
}

bool khub_variant_parse(const char *name_in, khub_variant *v, char *why, size_t why_n) {
    char name[sizeof v->name]; /* name_in may be v->name */
    snprintf(name, sizeof name, "%s", name_in);
    memset(v, 0, sizeof *v);
    memcpy(v->name, name, sizeof name);
    if (!strcmp(name, "ember-stablehlo")) {
        snprintf(v->backend, sizeof v->backend, "stablehlo");
        return true;
    }
    const char *tok[8];
    size_t len[8];
    int n = 0;
    for (const char *p = name; n < 8;) {
        const char *d = strchr(p, '-');
        tok[n] = p;
        len[n++] = d ? (size_t)(d - p) : strlen(p);
        if (!d) break;
        p = d + 1;
    }
    bool ok = (n == 5 || n == 6) && len[0] == 5 && !strncmp(tok[0], "ember", 5) && len[1] > 3 &&
              !strncmp(tok[1], "abi", 3);
    if (ok) {
        char num[16];
        ok = copy_tok(num, sizeof num, tok[1] + 3, len[1] - 3) &&
             strspn(num, "0123456789") == strlen(num);
        v->abi = ok ? atoi(num) : 0;
    }
    ok = ok && copy_tok(v->backend, sizeof v->backend, tok[2], len[2]) &&
         (n == 5 || copy_tok(v->feature, sizeof v->feature, tok[3], len[3])) &&
         copy_tok(v->arch, sizeof v->arch, tok[n - 2], len[n - 2]) &&
         copy_tok(v->os, sizeof v->os, tok[n - 1], len[n - 1]);
    if (!ok)
        snprintf(why, why_n,
                 "not a variant name (ember-abi<N>-<backend>[-<feature>]-<arch>-<os>, or "
                 "ember-stablehlo)");
    return ok;
}

bool khub_variant_host_ok(const khub_variant *v, int *rank, char *why, size_t why_n) {
    *rank = 0;
    if (!strcmp(v->backend, "stablehlo")) return true; /* noarch: rank 0, below any CPU variant */
    if (v->abi != (int)EMBER_KERNEL_ABI_VERSION) {
        snprintf(why, why_n, "ABI %d, Ember speaks %u", v->abi, EMBER_KERNEL_ABI_VERSION);
        return false;
    }
    if (strcmp(v->os, HOST_OS)) {
        snprintf(why, why_n, "built for %s; this is %s", v->os, HOST_OS);
        return false;
    }
    if (strcmp(v->arch, HOST_ARCH)) {
        snprintf(why, why_n, "built for %s; this machine is %s", v->arch, HOST_ARCH);
        return false;
    }
    if (strcmp(v->backend, "cpu")) {
        snprintf(why, why_n, "backend %s needs a device this Ember does not load kernels for "
                             "(CPU only so far)", v->backend);
        return false;
    }
    const feature *f = feature_find(v->feature[0] ? v->feature : "generic");
    if (!f) {
        snprintf(why, why_n, "unknown CPU feature '%s' (known: generic, avx2, avx512, "
                             "avx512bf16, neon, neonbf16)", v->feature);
        return false;
    }
    if (!host_has(f)) {
        snprintf(why, why_n, "needs %s; this CPU runs %s", f->label, host_feature()->label);
        return false;
    }
    *rank = f->rank;
    return true;
}

bool khub_variant_target_ok(const khub_variant *v, const char *target, char *why, size_t why_n) {
    bool shlo = !strcmp(v->backend, "stablehlo"), pjrt = !strncmp(target, "pjrt", 4);
    if (shlo && !strcmp(target, "cpu")) {
        snprintf(why, why_n, "StableHLO variants are for PJRT devices; the target is the CPU");
        return false;
    }
    if (!shlo && pjrt) {
        snprintf(why, why_n, "a %s variant; the target is a PJRT device (%s), which takes "
                             "ember-stablehlo variants", v->backend, target);
        return false;
    }
    if (*target && strcmp(target, "cpu") && !pjrt) {
        snprintf(why, why_n, "unknown target '%s' (cpu, pjrt or pjrt:<platform>)", target);
        return false;
    }
    return true;
}

void khub_host_files_init(khub_host_files *h) {
    h->n = 0;
    for (int r = 4; r >= 1; r--)
        for (size_t i = 0; i < sizeof features / sizeof *features && h->n < 7; i++)
            if (features[i].rank == r && host_has(&features[i])) {
                char name[128];
                snprintf(name, sizeof name, "ember-abi%u-cpu-%s-%s-%s", EMBER_KERNEL_ABI_VERSION,
                         features[i].name, HOST_ARCH, HOST_OS);
                memcpy(h->names[h->n], name, sizeof name);
                snprintf(h->files[h->n], sizeof h->files[0], "build/%.127s/metadata.json", name);
                h->opt[h->n] = h->files[h->n];
                h->n++;
            }
    /* the noarch StableHLO variant, for PJRT devices */
    snprintf(h->names[h->n], sizeof h->names[0], "ember-stablehlo");
    snprintf(h->files[h->n], sizeof h->files[0], "build/ember-stablehlo/metadata.json");
    h->opt[h->n] = h->files[h->n];
    h->n++;
    h->opt[h->n] = NULL;
}
