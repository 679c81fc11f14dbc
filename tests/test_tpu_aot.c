/*
 * Compile-only TPU devices (tpu-aot:TOPOLOGY[:N]) through libtpu's topologies: names, the
 * topology and its devices, shape-only eager ops, refused reads, XLA's cost analysis and memory
 * statistics, compiled functions, fused chains, the native ragged dot, and the compiled decode
 * step of every test checkpoint family on v5e and v6e. Without libtpu (pip install libtpu, or
 * EMBER_PJRT_TPU_PLUGIN=/path/libtpu.so) the device tests print a loud SKIP.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/pjrt/pjrt.h"
#include "ember/ember.h"
#include "harness.h"

/* ---- without a plugin ---- */

static void test_names(void) {
    char prefix[64];
    const char *topo;
    size_t tl;
    int idx;
    CHECK(pj_aot_parse("tpu-aot:v6e:2x4", prefix, sizeof prefix, &topo, &tl, &idx));
    CHECK(!strcmp(prefix, "tpu-aot:v6e:2x4") && tl == 7 && !strncmp(topo, "v6e:2x4", tl) &&
          idx == 0);
    CHECK(pj_aot_parse("tpu-aot:v5p:2x2x1:3", prefix, sizeof prefix, &topo, &tl, &idx));
    CHECK(!strcmp(prefix, "tpu-aot:v5p:2x2x1") && !strncmp(topo, "v5p:2x2x1", tl) && idx == 3);
    CHECK(!pj_aot_parse("tpu:0", prefix, sizeof prefix, &topo, &tl, &idx));
    CHECK(!pj_aot_parse("tpu-aot:v6e", prefix, sizeof prefix, &topo, &tl, &idx));
    CHECK(!pj_aot_parse("tpu-aot:v6e:", prefix, sizeof prefix, &topo, &tl, &idx));
    CHECK(!pj_aot_parse("tpu-aot:v6e:2x4:", prefix, sizeof prefix, &topo, &tl, &idx));
    CHECK(!pj_aot_parse("tpu-aot:v6e:2x4:-1", prefix, sizeof prefix, &topo, &tl, &idx));
    CHECK(!pj_aot_parse("tpu-aot:v6e:2y4", prefix, sizeof prefix, &topo, &tl, &idx));
    CHECK(pj_aot_parse("cuda-aot:h100_sxm", prefix, sizeof prefix, &topo, &tl, &idx));
    CHECK(!strcmp(prefix, "cuda-aot:h100_sxm") && !strncmp(topo, "h100_sxm", tl) && idx == 0);
    CHECK(pj_aot_parse("cuda-aot:h200:1", prefix, sizeof prefix, &topo, &tl, &idx) && idx == 1);
    CHECK(!pj_aot_parse("cuda-aot:", prefix, sizeof prefix, &topo, &tl, &idx));
}

/* Multi-device compile options (issue 18 plugs in here): canonical protobuf bytes. */
static void test_compile_options_spec(void) {
    unsigned char o[256];
    /* no spec: the portable single-device bytes */
    size_t n0 = pj_compile_options_for(NULL, o, sizeof o);
    unsigned char p[64];
    CHECK(n0 > 0 && n0 == pj_compile_options(p, sizeof p) && !memcmp(o, p, n0));
    /* 1 replica x 2 partitions, SPMD, devices 4 and 5:
     * 1a 14 {20 01 28 02 30 01 4a 0c {08 01 10 02 1a 02 {08 04} 1a 02 {08 05}}} */
    int64_t ids[2] = {4, 5};
    pj_compile_spec sp = {1, 2, true, ids, false};
    size_t n = pj_compile_options_for(&sp, o, sizeof o);
    static const unsigned char want[] = {0x1a, 0x14, 0x20, 0x01, 0x28, 0x02, 0x30, 0x01,
                                         0x4a, 0x0c, 0x08, 0x01, 0x10, 0x02, 0x1a, 0x02,
                                         0x08, 0x04, 0x1a, 0x02, 0x08, 0x05};
    CHECK_MSG(n == sizeof want && !memcmp(o, want, n), "%zu bytes", n);
    /* 2 replicas x 1 partition: one computation listing both replicas' devices */
    pj_compile_spec rp = {2, 1, false, ids, false};
    n = pj_compile_options_for(&rp, o, sizeof o);
    static const unsigned char want2[] = {0x1a, 0x10, 0x20, 0x02, 0x28, 0x01, 0x4a, 0x0a,
                                          0x08, 0x02, 0x10, 0x01, 0x1a, 0x04, 0x08, 0x04,
                                          0x08, 0x05};
    CHECK_MSG(n == sizeof want2 && !memcmp(o, want2, n), "%zu bytes", n);
    /* Shardy (TPU's SPMD programs): use_shardy_partitioner (19) after the assignment */
    pj_compile_spec sy = {1, 2, true, ids, true};
    n = pj_compile_options_for(&sy, o, sizeof o);
    static const unsigned char want3[] = {0x1a, 0x17, 0x20, 0x01, 0x28, 0x02, 0x30, 0x01,
                                          0x4a, 0x0c, 0x08, 0x01, 0x10, 0x02, 0x1a, 0x02,
                                          0x08, 0x04, 0x1a, 0x02, 0x08, 0x05, 0x98, 0x01, 0x01};
    CHECK_MSG(n == sizeof want3 && !memcmp(o, want3, n), "%zu bytes", n);
    CHECK(pj_compile_options_for(&sp, o, 8) == 0); /* does not fit: nothing */
}

/* ---- with libtpu ---- */

static em_device *aot(em_ctx *c, const char *name) {
    em_device *d = em_device_get(c, name);
    if (!d) {
        em_test_skip("no libtpu for %s (pip install libtpu, or set "
                     "EMBER_PJRT_TPU_PLUGIN=/path/libtpu.so): %s",
                     name, em_ctx_error(c)->message);
        em_ctx_clear_error(c);
    }
    return d;
}

static void test_topology(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = aot(c, "tpu-aot:v5e:2x2");
    if (!d) goto out;
    CHECK(em_device_is_pjrt(d) && em_device_is_compile_only(d));
    CHECK(!em_device_is_compile_only(em_device_cpu()));
    em_pjrt_topology t;
    CHECK(em_pjrt_topology_get(d, &t) == EM_OK);
    CHECK(!strcmp(t.name, "v5e:2x2") && t.n_devices == 4);
    CHECK_MSG(strstr(t.device_kind, "v5") != NULL, "%s", t.device_kind);
    CHECK(!strcmp(t.generation, "v5e") && t.hbm_bytes == 16e9 && t.hbm_gbs > 0 &&
          strstr(t.source, "cloud.google.com"));
    /* the compiler's limit sits a little below the chip's HBM */
    CHECK(t.device_memory_limit > 0 && (double)t.device_memory_limit <= t.hbm_bytes * 1.1);
    CHECK(em_pjrt_topology_get(em_device_cpu(), &t) == EM_ERR_INVALID_ARG);
    em_device_info info;
    CHECK(em_device_info_get(d, &info) == EM_OK && !strcmp(info.platform, "tpu") &&
          strstr(info.kind, "compile-only") && info.memory_bytes > 0);
    /* every device of the slice, and a clear error past it */
    CHECK(em_device_get(c, "tpu-aot:v5e:2x2:3") != NULL);
    CHECK(em_device_get(c, "tpu-aot:v5e:2x2:0") == d);
    CHECK(em_device_get(c, "tpu-aot:v5e:2x2:4") == NULL);
    CHECK_ERR(c, EM_ERR_DEVICE, "v5e:2x2", "4 device");
    em_ctx_clear_error(c);
    /* a slice libtpu does not know: its own word for it */
    CHECK(em_device_get(c, "tpu-aot:v99:2x2") == NULL);
    CHECK_ERR(c, EM_ERR_DEVICE, "v99:2x2");
    em_ctx_clear_error(c);
out:
    em_ctx_free(c);
}

/* f32 data for a shape */
static float *ramp(int64_t n) {
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; v && i < n; i++) v[i] = (float)(i % 7) - 3;
    return v;
}

typedef struct find_report {
    const char *needle;
    bool found;
    em_pjrt_program_report r;
} find_report;

static int find_cb(const em_pjrt_program_report *r, void *user) {
    find_report *f = user;
    if (!strstr(r->what, f->needle)) return 0;
    f->r = *r;
    f->found = true;
    return 1;
}

static void test_eager_shape_only(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = aot(c, "tpu-aot:v6e:2x4");
    if (!d) goto out;
    em_scope_push(c);
    CHECK(em_pjrt_projection_reset(d) == EM_OK);
    float *va = ramp(128 * 256), *vb = ramp(256 * 64);
    /* data from the host: the device keeps the shape */
    em_tensor *a = em_cast(c, em_from_host_on(c, d, EM_F32, EM_SHAPE(128, 256), va), EM_BF16);
    em_tensor *b = em_cast(c, em_from_host_on(c, d, EM_F32, EM_SHAPE(256, 64), vb), EM_BF16);
    em_tensor *y = em_silu(c, em_matmul(c, a, b));
    CHECK_MSG(y != NULL, "%s", em_ctx_status(c) ? em_ctx_error(c)->message : "");
    if (!y) goto done;
    CHECK(em_tensor_ndim(y) == 2 && em_tensor_dim(y, 0) == 128 && em_tensor_dim(y, 1) == 64 &&
          em_tensor_dtype(y) == EM_BF16 && em_tensor_device(y) == d);
    /* a wrong shape is still reported at the op, naming it */
    CHECK(em_matmul(c, a, a) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "matmul");
    em_ctx_clear_error(c);
    /* values: refused, naming the device as compile-only */
    unsigned short h[128 * 64];
    CHECK(em_to_host(c, y, h, sizeof h) == EM_ERR_UNSUPPORTED);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "tpu-aot:v6e:2x4:0", "compile-only");
    em_ctx_clear_error(c);
    double item;
    CHECK(em_item(c, em_sum(c, y, NULL, 0, false), &item) != EM_OK);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "compile-only");
    em_ctx_clear_error(c);
    CHECK(em_to(c, y, em_device_cpu()) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "compile-only");
    em_ctx_clear_error(c);
    /* between devices of the slice: shapes move */
    em_device *d1 = em_device_get(c, "tpu-aot:v6e:2x4:1");
    em_tensor *y1 = d1 ? em_to(c, y, d1) : NULL;
    CHECK(y1 && em_tensor_device(y1) == d1 && em_tensor_dim(y1, 1) == 64);
    /* XLA's cost analysis: a plain dot's flops are 2 M N K; its memory: the operands */
    find_report f = {"matmul(bf16[128,256], bf16[256,64])", false, {.flops = 0}};
    CHECK(em_pjrt_reports(d, find_cb, &f) > 0 && f.found);
    /* (the count includes a rounding of each output element) */
    CHECK_MSG(f.r.flops >= 2.0 * 128 * 256 * 64 && f.r.flops < 2.01 * 128 * 256 * 64, "flops %g",
              f.r.flops);
    CHECK(f.r.roofline_seconds > 0);
    CHECK(f.r.optimal_seconds > 0 && f.r.bytes_accessed >= (128 * 256 + 256 * 64) * 2);
    CHECK(f.r.argument_bytes == (128 * 256 + 256 * 64) * 2 && f.r.output_bytes == 128 * 64 * 2);
    CHECK(f.r.peak_bytes >= f.r.argument_bytes && f.r.n_outputs == 1);
    em_pjrt_projection p;
    CHECK(em_pjrt_projection_get(d, &p) == EM_OK);
    /* two casts, the matmul, silu, the sum (the failed matmul and the reads launch nothing) */
    CHECK_MSG(p.launches == 5, "%lld launches", (long long)p.launches);
    CHECK(p.flops >= 2.0 * 128 * 256 * 64 && p.optimal_seconds > 0 && p.max_peak_bytes > 0);
    CHECK(p.resident_bytes >= (128 * 256 + 256 * 64) * (4 + 2));
    CHECK(em_pjrt_projection_get(em_device_cpu(), &p) == EM_ERR_INVALID_ARG);
done:
    free(va);
    free(vb);
    em_scope_pop(c);
out:
    em_ctx_free(c);
}

/* libtpu 0.0.51's fusion pass crashed (SIGSEGV) on a NaN-propagating max reduce whose result is
 * broadcast back against its input in a rank-3 tensor: softmax over any dim of f32[3,5,17] but
 * the middle one. On TPU the max is lowered another way (pj_reduce_nan); these compile now. */
static void test_softmax_rank3(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = aot(c, "tpu-aot:v6e:2x4");
    if (!d) goto out;
    em_ctx_set_device(c, d);
    em_scope_push(c);
    em_tensor *x = em_zeros(c, EM_F32, EM_SHAPE(3, 5, 17));
    for (int dim = 0; dim < 3; dim++) {
        em_tensor *y = em_softmax(c, x, dim), *z = em_log_softmax(c, em_cast(c, x, EM_BF16), dim);
        CHECK_MSG(y && z && em_tensor_dim(y, 2) == 17 && em_tensor_dtype(z) == EM_BF16,
                  "dim %d: %s", dim, em_ctx_status(c) ? em_ctx_error(c)->message : "");
        em_ctx_clear_error(c);
    }
    /* and the reductions themselves, fused with what follows */
    em_ctx_set_eager_mode(c, EM_EAGER_FUSED);
    int dim0 = 0;
    em_tensor *m = em_sub(c, x, em_max(c, x, &dim0, 1, true));
    float v[3 * 5 * 17];
    CHECK(m && em_to_host(c, m, v, sizeof v) == EM_ERR_UNSUPPORTED);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "compile-only");
    em_ctx_clear_error(c);
    em_ctx_set_eager_mode(c, EM_EAGER_ASYNC);
    em_scope_pop(c);
out:
    em_ctx_free(c);
}

/* chlo.ragged_dot, TPU's own ragged dot: group sizes are data, nothing checks them here */
static void test_ragged_native(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = aot(c, "tpu-aot:v6e:2x4");
    if (!d) goto out;
    em_ctx_set_device(c, d);
    em_scope_push(c);
    em_tensor *x = em_zeros(c, EM_BF16, EM_SHAPE(64, 256));
    em_tensor *w = em_zeros(c, EM_BF16, EM_SHAPE(16, 256, 128));
    int32_t gs[16];
    for (int i = 0; i < 16; i++) gs[i] = 4;
    em_tensor *g = em_from_host(c, EM_I32, EM_SHAPE(16), gs);
    em_tensor *y = em_ragged_dot(c, x, w, g, false);
    CHECK_MSG(y && em_tensor_dim(y, 0) == 64 && em_tensor_dim(y, 1) == 128, "%s",
              em_ctx_status(c) ? em_ctx_error(c)->message : "");
    find_report f = {"ragged_dot", false, {.flops = 0}};
    CHECK(em_pjrt_reports(d, find_cb, &f) > 0 && f.found && f.r.flops > 0);
    em_scope_pop(c);
    em_ctx_clear_error(c);
out:
    em_ctx_free(c);
}

static int step_fn(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *st, int n_st,
                   em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)st, (void)n_st, (void)max_out;
    em_tensor *w = user;
    out[0] = em_softmax(c, em_matmul(c, in[0], w), -1);
    return out[0] ? 1 : -1;
}

static void test_compiled_and_fused(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = aot(c, "tpu-aot:v5e:2x2");
    if (!d) goto out;
    em_ctx_set_device(c, d);
    em_scope_push(c);
    em_tensor *w = em_keep(c, em_zeros(c, EM_F32, EM_SHAPE(32, 16)));
    em_tensor *x = em_zeros(c, EM_F32, EM_SHAPE(4, 32));
    em_compiled *f = em_compile(c, "step", step_fn, w);
    em_tensor *y = NULL;
    CHECK(em_pjrt_projection_reset(d) == EM_OK);
    CHECK(em_compiled_call(c, f, &x, 1, NULL, 0, &y, 1) == 1);
    CHECK(y && em_tensor_dim(y, 0) == 4 && em_tensor_dim(y, 1) == 16);
    em_compile_stats cs;
    em_compiled_stats(f, &cs);
    CHECK(cs.compiles == 1 && !strcmp(cs.backend, "pjrt"));
    /* the second call reuses the program */
    CHECK(em_compiled_call(c, f, &x, 1, NULL, 0, &y, 1) == 1);
    em_compiled_stats(f, &cs);
    CHECK(cs.compiles == 1 && cs.calls == 2);
    em_pjrt_projection p;
    CHECK(em_pjrt_projection_get(d, &p) == EM_OK && p.launches == 2 && p.flops > 0);
    CHECK_MSG(strstr(p.max_peak_what, "compile graph") != NULL, "%s", p.max_peak_what);
    em_compiled_free(f);
    /* fused: the chain compiles as one program when its value is asked for, then the read is
     * refused */
    em_ctx_set_eager_mode(c, EM_EAGER_FUSED);
    em_tensor *z = em_mul(c, em_add(c, x, x), em_exp(c, x));
    float v[4 * 32];
    CHECK(em_to_host(c, z, v, sizeof v) == EM_ERR_UNSUPPORTED);
    em_ctx_clear_error(c);
    find_report fr = {"fused chain of 3", false, {.flops = 0}};
    CHECK(em_pjrt_reports(d, find_cb, &fr) > 0 && fr.found);
    em_ctx_set_eager_mode(c, EM_EAGER_ASYNC);
    em_scope_pop(c);
out:
    em_ctx_free(c);
}

/* The decode step of every test checkpoint family, compiled for a v5e and a v6e chip. */
static void decode_step(const char *device, const char *family) {
    em_ctx *c = em_ctx_create();
    em_device *d = aot(c, device);
    if (!d) goto out;
    em_model_options o = em_model_default_options();
    o.device = device;
    o.progress = false;
    o.offline = true;
    em_model *m = em_model_load(c, em_test_fixture_path("models", family), &o);
    CHECK_MSG(m != NULL, "%s on %s: %s", family, device, em_ctx_error(c)->message);
    if (!m) goto out;
    if (!em_model_is_causal_lm(m)) {
        em_model_free(m);
        goto out;
    }
    em_scope_push(c);
    em_kv_cache *kv = em_kv_cache_create(c, m, 2, 64);
    int64_t ids[2] = {5, 7};
    em_tensor *t = em_from_host_on(c, d, EM_I64, EM_SHAPE(2, 1), ids);
    em_tensor *lg = NULL;
    const char *how = "compiled";
    em_pjrt_projection_reset(d);
    if (em_model_compile_supported(m)) {
        em_model_compiled *mc = em_model_compile(c, m, kv, 64);
        lg = mc ? em_model_forward_compiled(c, mc, t, NULL, true) : NULL;
        em_model_compiled_free(mc);
    } else { /* a family with its own forward: its eager step, op by op */
        how = "eager";
        lg = em_model_forward(c, m, t, NULL, kv, true);
    }
    CHECK_MSG(lg && em_tensor_dim(lg, 0) == 2 && em_tensor_dim(lg, 1) == 1, "%s %s on %s: %s",
              family, how, device, em_ctx_status(c) ? em_ctx_error(c)->message : "no logits");
    em_pjrt_projection p;
    if (lg && em_pjrt_projection_get(d, &p) == EM_OK)
        printf("%-12s %-16s %-8s %3lld programs, %.3g FLOP, %.3g B accessed, roofline %.2f us\n",
               family, device, how, (long long)p.launches, p.flops, p.bytes_accessed,
               p.roofline_seconds * 1e6);
    em_kv_cache_free(kv);
    em_scope_pop(c);
    em_model_free(m);
out:
    em_ctx_clear_error(c);
    em_ctx_free(c);
}

static void test_decode_steps(void) {
    static const char *const fams[] = {"llama",   "mistral", "qwen3",      "qwen3_moe",
                                       "mixtral", "gemma3_text", "gemma4_text", "gemma4"};
    static const char *const devs[] = {"tpu-aot:v5e:2x2", "tpu-aot:v6e:2x4"};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof fams / sizeof fams[0]; i++) decode_step(devs[k], fams[i]);
}

/* cuda-aot: XLA's CUDA plugin compiling for a GPU it does not have, described by a target
 * configuration. The one here is a minimal description of an H100 SXM (NVIDIA's published
 * figures: 132 SMs, 80 GB at 3.35 TB/s, 50 MB L2, compute capability 9.0), enough for XLA. */
static const char h100_config[] =
    "gpu_device_info {\n  threads_per_block_limit: 1024\n  threads_per_warp: 32\n"
    "  shared_memory_per_block: 49152\n  shared_memory_per_core: 233472\n"
    "  threads_per_core_limit: 2048\n  core_count: 132\n  fpus_per_core: 128\n"
    "  block_dim_limit_x: 2147483647\n  block_dim_limit_y: 65535\n  block_dim_limit_z: 65535\n"
    "  memory_bandwidth: 3352320000000\n  l2_cache_size: 52428800\n  clock_rate_ghz: 1.98\n"
    "  device_memory_size: 84942979072\n  shared_memory_per_block_optin: 232448\n"
    "  cuda_compute_capability { major: 9 minor: 0 }\n  registers_per_core_limit: 65536\n"
    "  registers_per_block_limit: 65536\n}\nplatform_name: \"CUDA\"\n"
    "dnn_version_info { major: 9 minor: 1 }\ndevice_description_str: \"NVIDIA H100 80GB HBM3\"\n";

static void test_cuda_aot(void) {
    char path[] = "/tmp/ember_h100_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) return;
    fputs(h100_config, f);
    fclose(f);
    setenv("EMBER_CUDA_TARGET_CONFIG", path, 1);
    em_ctx *c = em_ctx_create();
    em_device *d = em_device_get(c, "cuda-aot:h100_sxm");
    if (!d) {
        em_test_skip("no XLA CUDA plugin (pip install jax-cuda13-pjrt, or set "
                     "EMBER_PJRT_CUDA_PLUGIN): %s", em_ctx_error(c)->message);
        goto out;
    }
    CHECK(em_device_is_compile_only(d));
    em_device_info info;
    CHECK(em_device_info_get(d, &info) == EM_OK && strstr(info.kind, "H100") &&
          info.memory_bytes == 84942979072LL);
    em_ctx_set_device(c, d);
    em_scope_push(c);
    em_tensor *y = em_silu(c, em_matmul(c, em_zeros(c, EM_BF16, EM_SHAPE(64, 128)),
                                        em_zeros(c, EM_BF16, EM_SHAPE(128, 32))));
    CHECK_MSG(y && em_tensor_dim(y, 1) == 32, "%s",
              em_ctx_status(c) ? em_ctx_error(c)->message : "");
    float v[64 * 32];
    CHECK(em_to_host(c, em_cast(c, y, EM_F32), v, sizeof v) == EM_ERR_UNSUPPORTED);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "GPU target h100_sxm", "compile-only");
    em_ctx_clear_error(c);
    /* the plugin gives no cost analysis for a GPU program compiled this way; memory it does */
    find_report fr = {"matmul(", false, {.flops = 0}};
    CHECK(em_pjrt_reports(d, find_cb, &fr) > 0 && fr.found);
    CHECK(fr.r.argument_bytes == (64 * 128 + 128 * 32) * 2 && fr.r.peak_bytes > 0);
    em_scope_pop(c);
    /* without a configuration: what to give it */
    unsetenv("EMBER_CUDA_TARGET_CONFIG");
    CHECK(em_device_get(c, "cuda-aot:b200") == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "target configuration", "EMBER_CUDA_TARGET_CONFIG");
out:
    unsetenv("EMBER_CUDA_TARGET_CONFIG");
    remove(path);
    em_ctx_clear_error(c);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_names), T(test_compile_options_spec), T(test_topology),
             T(test_eager_shape_only), T(test_softmax_rank3), T(test_ragged_native), T(test_compiled_and_fused),
             T(test_decode_steps), T(test_cuda_aot))
