/*
 * A whole model compiled as one SPMD program for the chips of a compile-only TPU slice
 * (tpu-aot:v6e:2x4, --spmd N): weights without values (em_model_options.shape_only) from a
 * checkpoint whose data is a sparse hole, and the collectives libtpu's partitioner inserts
 * against the tensor-parallel plan (test_pjrt_spmd_choices runs the MoE shard choices). Without
 * libtpu (pip install libtpu, or EMBER_PJRT_TPU_PLUGIN=/path/libtpu.so) the device tests print
 * a loud SKIP.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ember/ember.h"
#include "harness.h"

#define SLICE "tpu-aot:v6e:2x4"

/* ---- a checkpoint without its data ---- */

static bool copy_file(const char *from, const char *to, long limit) {
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    char buf[65536];
    size_t k;
    long done = 0;
    bool ok = in && out;
    while (ok && (limit < 0 || done < limit) &&
           (k = fread(buf, 1, limit < 0 || limit - done > (long)sizeof buf ? sizeof buf
                                                                           : (size_t)(limit - done),
                      in)) > 0) {
        ok = fwrite(buf, 1, k, out) == k;
        done += (long)k;
    }
    if (in) fclose(in);
    if (out) ok = fclose(out) == 0 && ok;
    return ok;
}

/* dir/<family>: the fixture's config files and its model.safetensors' header, the data a
 * sparse hole of the same length (the file is valid; reading it would give zeros) */
static bool hollow_copy(const char *family, char *dir, size_t n) {
    snprintf(dir, n, "/tmp/ember_aot_spmd_%d_%s", (int)getpid(), family);
    mkdir(dir, 0755);
    const char *src = em_test_fixture_path("models", family);
    char a[1200], b[1200];
    static const char *const cfgs[] = {"config.json", "generation_config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/%s", src, cfgs[i]);
        snprintf(b, sizeof b, "%s/%s", dir, cfgs[i]);
        if (!copy_file(a, b, -1)) return false;
    }
    snprintf(a, sizeof a, "%s/model.safetensors", src);
    snprintf(b, sizeof b, "%s/model.safetensors", dir);
    FILE *f = fopen(a, "rb");
    unsigned char len[8];
    struct stat st;
    bool ok = f && fread(len, 1, 8, f) == 8 && stat(a, &st) == 0;
    if (f) fclose(f);
    if (!ok) return false;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | len[i];
    return copy_file(a, b, (long)(8 + hl)) && truncate(b, st.st_size) == 0;
}

static void remove_copy(const char *dir) {
    char p[1200];
    static const char *const files[] = {"config.json", "generation_config.json",
                                        "model.safetensors"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        remove(p);
    }
    rmdir(dir);
}

static em_model_options aot_options(int spmd) {
    em_model_options o = em_model_default_options();
    o.device = SLICE;
    o.progress = false;
    o.offline = true;
    o.shape_only = true;
    o.spmd = spmd;
    return o;
}

/* Refused where values would be needed, naming why; no libtpu needed. */
static void test_shape_only_refused(void) {
    em_ctx *c = em_ctx_create();
    em_model_options o = em_model_default_options();
    o.progress = false;
    o.offline = true;
    o.shape_only = true;
    o.device = "cpu";
    CHECK(em_model_load(c, em_test_fixture_path("models", "qwen3"), &o) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "shape_only", "compile-only");
    em_ctx_clear_error(c);
    em_ctx_free(c);
}

static em_device *slice_or_skip(em_ctx *c) {
    em_device *d = em_device_get(c, SLICE);
    if (!d) {
        em_test_skip("no libtpu for " SLICE " (pip install libtpu, or set "
                     "EMBER_PJRT_TPU_PLUGIN=/path/libtpu.so): %s", em_ctx_error(c)->message);
        em_ctx_clear_error(c);
    }
    return d;
}

/* The weights of the hollow copy: the fixture's shapes and the model's dtype, nothing read. */
static void test_shape_only_load(void) {
    em_ctx *c = em_ctx_create();
    char dir[256];
    if (!slice_or_skip(c)) goto out;
    CHECK(hollow_copy("qwen3", dir, sizeof dir));
    struct stat st;
    char p[300];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECK(stat(p, &st) == 0);
    em_model_options o = aot_options(0);
    em_model *m = em_model_load(c, dir, &o);
    CHECK_MSG(m != NULL, "%s", em_ctx_status(c) ? em_ctx_error(c)->message : "");
    em_ctx_clear_error(c);
    em_model_options ref = em_model_default_options();
    ref.progress = false;
    ref.offline = true;
    em_model *r = em_model_load(c, em_test_fixture_path("models", "qwen3"), &ref);
    CHECK(r != NULL);
    if (m && r) {
        int n = em_model_params(c, m, NULL, 0), nr = em_model_params(c, r, NULL, 0);
        CHECK(n > 0 && n == nr);
        em_model_param *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
        if (a && b && em_model_params(c, m, a, n) == n && em_model_params(c, r, b, n) == n) {
            int64_t bytes = 0;
            for (int i = 0; i < n; i++) {
                const em_tensor *x = a[i].tensor, *y = b[i].tensor;
                bool same = !strcmp(a[i].name, b[i].name) && em_tensor_ndim(x) == em_tensor_ndim(y) &&
                            em_tensor_dtype(x) == em_tensor_dtype(y) &&
                            !strcmp(em_device_name(em_tensor_device(x)), SLICE ":0");
                for (int k = 0; same && k < em_tensor_ndim(x); k++)
                    same = em_tensor_dim(x, k) == em_tensor_dim(y, k);
                CHECK_MSG(same, "%s", a[i].name);
                bytes += (int64_t)em_tensor_nbytes(x);
            }
            /* the weights' bytes are the file's length; the file holds their header only */
            CHECK_MSG(bytes <= st.st_size && (int64_t)st.st_blocks * 512 < bytes,
                      "%lld B of weights, %lld B file, %lld B on disk", (long long)bytes,
                      (long long)st.st_size, (long long)st.st_blocks * 512);
        }
        free(a);
        free(b);
    }
    em_model_free(m);
    em_model_free(r);
    remove_copy(dir);
out:
    em_ctx_clear_error(c);
    em_ctx_free(c);
}

/* ---- the SPMD decode step of a whole model ---- */

#define MAX_SEEN 4096

typedef struct seen {
    const em_pjrt_program_report *p[MAX_SEEN];
    int n;
    const char *tag;
    const em_pjrt_program_report *found; /* a program not seen before, with the tag */
} seen;

static int note_cb(const em_pjrt_program_report *r, void *user) {
    seen *s = user;
    if (s->n < MAX_SEEN) s->p[s->n++] = r;
    return 0;
}

static int new_cb(const em_pjrt_program_report *r, void *user) {
    seen *s = user;
    if (!strstr(r->what, s->tag)) return 0;
    for (int i = 0; i < s->n; i++)
        if (s->p[i] == r) return 0;
    s->found = r;
    return 1;
}

/* Compiles the batch-1 decode step of family's hollow copy over `parts` chips; the report of
 * its program (copied into *out), false when it did not compile. */
static bool spmd_step(em_ctx *c, em_device *d, const char *family, int parts, bool split,
                      em_pjrt_program_report *out, int *layers) {
    char dir[256], tag[48];
    if (!hollow_copy(family, dir, sizeof dir)) {
        CHECK_MSG(false, "%s: cannot write the hollow copy", family);
        return false;
    }
    em_model_options o = aot_options(parts);
    o.spmd_split_gate_up = split;
    em_model *m = em_model_load(c, dir, &o);
    bool ok = false;
    if (m) {
        *layers = (int)em_model_config_get(m)->num_hidden_layers;
        static seen s;
        s.n = 0;
        s.found = NULL;
        snprintf(tag, sizeof tag, "SPMD over %d partitions", parts);
        s.tag = tag;
        em_pjrt_reports(d, note_cb, &s);
        em_scope_push(c);
        em_kv_cache *kv = em_kv_cache_create(c, m, 1, 64);
        int64_t id = 5;
        em_tensor *t = em_from_host_on(c, d, EM_I64, EM_SHAPE(1, 1), &id);
        em_model_compiled *mc = kv ? em_model_compile(c, m, kv, 64) : NULL;
        em_tensor *lg = mc ? em_model_forward_compiled(c, mc, t, NULL, true) : NULL;
        CHECK_MSG(lg && em_tensor_dim(lg, 0) == 1, "%s over %d chips%s: %s", family, parts,
                  split ? " (gate/up split)" : "",
                  em_ctx_status(c) ? em_ctx_error(c)->message : "no logits");
        em_pjrt_reports(d, new_cb, &s);
        if (lg && s.found) {
            *out = *s.found;
            ok = true;
        }
        CHECK_MSG(!lg || s.found, "%s: no new program '%s' in the reports", family, tag);
        em_model_compiled_free(mc);
        em_kv_cache_free(kv);
        em_scope_pop(c);
        em_model_free(m);
    } else {
        CHECK_MSG(false, "%s: %s", family, em_ctx_error(c)->message);
    }
    em_ctx_clear_error(c);
    remove_copy(dir);
    return ok;
}

static void print_report(const char *family, int parts, const char *how,
                         const em_pjrt_program_report *r) {
    printf("%-12s x%d %-15s %d all-reduce, %d all-gather, %d reduce-scatter, %d all-to-all, %d "
           "collective-permute; per chip %.3g FLOP, %.3g B accessed, arguments %lld B, peak %lld B\n",
           family, parts, how, r->all_reduces, r->all_gathers, r->reduce_scatters, r->all_to_alls,
           r->collective_permutes, r->flops, r->bytes_accessed, (long long)r->argument_bytes,
           (long long)r->peak_bytes);
}

/* A dense family: libtpu's partitioner inserts exactly the plan's collectives, those the
 * replica program holds (2 L + 1 all-reduce: the vocab-parallel embedding, then after o_proj
 * and after the MLP of each layer; 1 all-gather of the logits), nothing else. */
static void test_spmd_dense_collectives(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = slice_or_skip(c);
    em_pjrt_program_report r;
    int layers = 0;
    if (!d || !spmd_step(c, d, "qwen3", 2, false, &r, &layers)) goto out;
    print_report("qwen3", 2, "", &r);
    CHECK_MSG(r.all_reduces == 2 * layers + 1 && r.all_gathers == 1 && r.reduce_scatters == 0 &&
                  r.all_to_alls == 0 && r.collective_permutes == 0,
              "%s: %d all-reduce, %d all-gather, %d reduce-scatter, %d all-to-all, %d "
              "collective-permute; the plan has %d all-reduce and 1 all-gather",
              r.what, r.all_reduces, r.all_gathers, r.reduce_scatters, r.all_to_alls,
              r.collective_permutes, 2 * layers + 1);
    /* one chip's share of the weights: less than the whole model's */
    CHECK(r.argument_bytes > 0 && r.flops > 0 && r.bytes_accessed > 0);
out:
    em_ctx_free(c);
}

/* MoE: the routed experts' chlo.ragged_dot compiles partitioned (libtpu's GSPMD partitioner
 * refuses it, "RaggedDot is only supported with Shardy": the TPU programs carry Shardy's
 * shardings); the gate/up stack whole on each chip, or split by its hidden dim, which holds
 * fewer bytes per chip and adds one all-reduce per layer (the [tokens, 2I] product). */
static void test_spmd_moe(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = slice_or_skip(c);
    em_pjrt_program_report whole, split;
    int layers = 0;
    if (!d || !spmd_step(c, d, "qwen3_moe", 2, false, &whole, &layers) ||
        !spmd_step(c, d, "qwen3_moe", 2, true, &split, &layers))
        goto out;
    print_report("qwen3_moe", 2, "gate/up whole", &whole);
    print_report("qwen3_moe", 2, "gate/up split", &split);
    CHECK_MSG(split.argument_bytes < whole.argument_bytes, "%lld B split, %lld B whole",
              (long long)split.argument_bytes, (long long)whole.argument_bytes);
    CHECK(whole.all_reduces >= 2 * layers + 1 && whole.all_gathers >= 1);
    CHECK_MSG(split.all_reduces >= whole.all_reduces + layers, "%d all-reduce split, %d whole",
              split.all_reduces, whole.all_reduces);
out:
    em_ctx_free(c);
}

/* Gemma 4 (a family with its own layer): its plan-split weights listed for the shardings. */
static void test_spmd_gemma4(void) {
    em_ctx *c = em_ctx_create();
    em_device *d = slice_or_skip(c);
    em_pjrt_program_report r;
    int layers = 0;
    if (!d || !spmd_step(c, d, "gemma4", 2, true, &r, &layers)) goto out;
    print_report("gemma4", 2, "gate/up split", &r);
    CHECK(r.all_reduces >= 2 * layers + 1 && r.all_gathers >= 1);
out:
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_shape_only_refused), T(test_shape_only_load), T(test_spmd_dense_collectives),
             T(test_spmd_moe), T(test_spmd_gemma4))
