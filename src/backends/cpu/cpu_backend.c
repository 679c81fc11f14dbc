/* The CPU device: memory, copies, properties and the kernel table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/cpu/cpu.h"
#include "core/kernel_registry.h"

/* Allocations at least this large are mapped directly and marked for transparent huge pages
 * (weights and activations of real models; fewer TLB misses when streaming them). */
#define BIG_ALLOC (2u << 20)

static void *cpu_raw_alloc(em_device *d, size_t n) {
    (void)d;
    if (n >= BIG_ALLOC) {
        void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
        madvise(p, n, MADV_HUGEPAGE);
#endif
        return p;
    }
    void *p = NULL;
    if (posix_memalign(&p, 64, n) != 0) return NULL;
    return p;
}

static void cpu_raw_free(em_device *d, void *p, size_t n) {
    (void)d;
    if (n >= BIG_ALLOC)
        munmap(p, n);
    else
        free(p);
}

static em_status cpu_write(em_ctx *c, em_storage *s, size_t off, const void *src, size_t n) {
    (void)c;
    memcpy((char *)s->data + off, src, n);
    return EM_OK;
}

static em_status cpu_read(em_ctx *c, em_storage *s, size_t off, void *dst, size_t n) {
    (void)c;
    memcpy(dst, (char *)s->data + off, n);
    return EM_OK;
}

static em_status cpu_query(const em_device *d, em_device_info *out) {
    (void)d;
    snprintf(out->platform, sizeof out->platform, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10)) {
                char *colon = strchr(line, ':');
                if (colon) {
                    colon++;
                    while (*colon == ' ') colon++;
                    colon[strcspn(colon, "\n")] = 0;
                    snprintf(out->kind, sizeof out->kind, "%s", colon);
                }
                break;
            }
        fclose(f);
    }
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES),
         psize = sysconf(_SC_PAGESIZE);
    out->memory_bytes = pages > 0 ? (int64_t)pages * psize : 0;
    out->memory_free = avail > 0 ? (int64_t)avail * psize : -1;
    out->threads = em_num_threads();
    em_cpu_features_str(out->features, sizeof out->features);
    return EM_OK;
}

static em_backend cpu_backend = {
    .struct_size = sizeof(em_backend),
    .platform = "cpu",
    .host_accessible = true,
    .raw_alloc = cpu_raw_alloc,
    .raw_free = cpu_raw_free,
    .write = cpu_write,
    .read = cpu_read,
    .sync = NULL,
    .query = cpu_query,
    .eval_lazy = em_cpu_eval_lazy,
    .program_build = em_cpu_program_build,
    .program_run = em_cpu_program_run,
    .program_free = em_cpu_program_free,
};

static em_cpu_group_fns cpu_groups[EM_OP_COUNT];

static em_device cpu_device;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_init(void) {
    em_cpu_register_ew(cpu_backend.kernels);
    em_cpu_register_create(cpu_backend.kernels);
    em_cpu_register_reduce(cpu_backend.kernels);
    em_cpu_register_linalg(cpu_backend.kernels);
    em_cpu_register_nn(cpu_backend.kernels);
    em_cpu_register_index(cpu_backend.kernels);
    em_cpu_register_conv(cpu_backend.kernels);
    em_cpu_register_moe(cpu_backend.kernels);
    em_cpu_register_adamw(cpu_backend.kernels);
    em_cpu_register_collective(cpu_backend.kernels);
    em_cpu_register_linalg_groups(cpu_groups);
    em_cpu_register_quant(cpu_backend.kernels);
    em_kreg_attach(&cpu_backend, "cpu");
    cpu_device.be = &cpu_backend;
    snprintf(cpu_device.name, sizeof cpu_device.name, "cpu");
    cpu_device.index = 0;
    /* freed blocks kept for reuse: a third of the machine's memory, at least 4 GiB. A training
     * step frees and reallocates several GB of activations and gradients; blocks handed back to
     * the system come back as fresh pages the kernel must zero (a 0.6B-shape step spent 15 % of
     * its time there with 4 GiB on a 24 GiB machine, and ran 18 % faster with 8) */
    int64_t limit = (int64_t)4 << 30;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && (int64_t)pages * page / 3 > limit) limit = (int64_t)pages * page / 3;
    const char *e = getenv("EMBER_CPU_CACHE_MB");
    if (e && *e) limit = (int64_t)atoll(e) << 20;
    em_allocator_init(&cpu_device.alloc, limit);
    em_device_register(&cpu_device);
}

em_device *em_device_cpu(void) {
    pthread_once(&cpu_once, cpu_init);
    return &cpu_device;
}

const em_cpu_group_fns *em_cpu_group_get(em_op_id op) {
    pthread_once(&cpu_once, cpu_init);
    return (unsigned)op < EM_OP_COUNT && cpu_groups[op].run ? &cpu_groups[op] : NULL;
}

/* "cpu" and "cpu:0" name the one CPU device. */
static em_device *cpu_open(em_ctx *c, const char *name, char *tried, size_t tried_n) {
    (void)c;
    (void)tried;
    (void)tried_n;
    return !strcmp(name, "cpu") || !strcmp(name, "cpu:0") ? em_device_cpu() : NULL;
}

static const char *const cpu_prefixes[] = {"cpu", NULL};

const em_backend_reg em_cpu_backend_reg = {
    .struct_size = sizeof(em_backend_reg),
    .name = "cpu",
    .prefixes = cpu_prefixes,
    .open = cpu_open,
    .host_device = em_device_cpu,
};

/* ---- helpers shared by CPU kernels ---- */

double em_cpu_get_f64(const em_tensor *t, int64_t i) {
    return em_load_f64(t->storage->data, t->dtype, em_offset_of(t, i));
}

int64_t em_cpu_get_i64(const em_tensor *t, int64_t i) {
    const char *p = t->storage->data;
    int64_t off = em_offset_of(t, i);
    switch (t->dtype) {
    case EM_I64: return ((const int64_t *)p)[off];
    case EM_I32: return ((const int32_t *)p)[off];
    default: return (int64_t)em_load_f64(p, t->dtype, off);
    }
}

float *em_cpu_to_f32(const em_tensor *t) {
    float *v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
    if (!v) return NULL;
    if (em_is_contiguous(t)) {
        em_convert(em_tensor_ptr(t), t->dtype, v, EM_F32, t->numel);
    } else {
        for (int64_t i = 0; i < t->numel; i++) v[i] = (float)em_cpu_get_f64(t, i);
    }
    return v;
}

void em_cpu_from_f32(em_tensor *t, const float *v) {
    em_convert(v, EM_F32, em_tensor_ptr(t), t->dtype, t->numel);
}
