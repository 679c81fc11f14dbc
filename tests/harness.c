#include "harness.h"

#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include "backends/cpu/cpu.h"
#include "core/file_read.h"
#include "ember/ember.h"

int em_test_failures;
int em_test_checks;
int em_test_skips;
static const char *current_test;

void em_test_skip(const char *fmt, ...) {
    em_test_skips++;
    fprintf(stderr, "*** SKIP %s: ", current_test ? current_test : "");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
}

void em_test_check_err(void *ctx, int status, const char *file, int line, const char **needles) {
    em_ctx *c = ctx;
    em_test_checks++;
    const em_error *e = em_ctx_error(c);
    if (!e) {
        em_test_failures++;
        fprintf(stderr, "%s:%d: expected an error (%s), got none\n", file, line,
                em_status_str((em_status)status));
        return;
    }
    if ((int)e->status != status) {
        em_test_failures++;
        fprintf(stderr, "%s:%d: expected %s, got: %s\n", file, line,
                em_status_str((em_status)status), e->message);
    }
    for (const char **n = needles; *n; n++)
        if (!strstr(e->message, *n)) {
            em_test_failures++;
            fprintf(stderr, "%s:%d: error message lacks \"%s\": %s\n", file, line, *n, e->message);
        }
    em_ctx_clear_error(c);
}

const char *em_test_fixtures_dir(void) {
    const char *d = getenv("EMBER_FIXTURES");
    return d && *d ? d : "tests/fixtures";
}

em_model *em_test_load_fixture_model(em_ctx *c, const char *family, const em_model_options *o) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/%s", em_test_fixtures_dir(), family);
    em_model_options opt = o ? *o : em_model_default_options();
    opt.progress = false;
    opt.offline = true;
    em_model *m = em_model_load(c, dir, &opt);
    CHECK_MSG(m != NULL, "%s: %s", family, em_ctx_error(c) ? em_ctx_error(c)->message : "");
    return m;
}

static void kernels_str(char *buf, size_t n) {
    snprintf(buf, n, "%s%s", em_cpu_isa_name(em_cpu_isa_get()), em_cpu_bf16_dot() ? "+bf16" : "");
}

bool em_test_check_kernels(void) {
    char got[32];
    kernels_str(got, sizeof got);
    const char *want = getenv("EMBER_TEST_EXPECT_KERNELS");
    if (want && *want && strcmp(want, got)) {
        fprintf(stderr, "the CPU kernels in use are %s, EMBER_TEST_EXPECT_KERNELS wants %s\n", got,
                want);
        return false;
    }
    return true;
}

int em_test_run(const em_test_case *tests, int n, int argc, char **argv) {
    if (!em_test_check_kernels()) return 1;
    const char *filter = argc > 1 ? argv[1] : NULL;
    int ran = 0, skipped = 0;
    for (int i = 0; i < n; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        int failures = em_test_failures, checks = em_test_checks, skips = em_test_skips;
        current_test = tests[i].name;
        tests[i].fn();
        current_test = NULL;
        ran++;
        bool skip = em_test_skips > skips;
        if (!skip && em_test_checks == checks && em_test_failures == failures) {
            em_test_failures++; /* a test that checks nothing proves nothing */
            fprintf(stderr, "%s: made no checks and did not say why (em_test_skip)\n",
                    tests[i].name);
        }
        const char *verdict = em_test_failures != failures ? "FAILED"
                            : skip && em_test_checks == checks ? "SKIPPED"
                            : skip                             ? "ok (part skipped)"
                                                               : "ok";
        skipped += skip && em_test_checks == checks && em_test_failures == failures;
        fprintf(stderr, "%-40s %s\n", tests[i].name, verdict);
    }
    char kern[32];
    kernels_str(kern, sizeof kern);
    fprintf(stderr, "%d tests, %d checks, %d failures, %d skipped (kernels: %s)\n", ran,
            em_test_checks, em_test_failures, skipped, kern);
    if (em_test_failures) return 1;
    if (ran == 0) {
        fprintf(stderr, "no test matches '%s'\n", filter ? filter : "");
        return 1;
    }
    return skipped == ran ? EM_TEST_SKIPPED : 0;
}

/* ---- tensor bundles ---- */
#include <jansson.h>
#include <math.h>

struct em_test_bundle {
    json_t *doc;
    unsigned char *data;
    size_t len;
};

em_test_bundle *em_test_bundle_load(const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.json", em_test_fixtures_dir(), rel);
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc) {
        fprintf(stderr, "cannot load %s: %s\n", path, je.text);
        em_test_failures++;
        return NULL;
    }
    snprintf(path, sizeof path, "%s/%s.bin", em_test_fixtures_dir(), rel);
    FILE *f = fopen(path, "rb");
    em_test_bundle *b = calloc(1, sizeof *b);
    if (!f || !b) {
        fprintf(stderr, "cannot open %s\n", path);
        em_test_failures++;
        if (f) fclose(f);
        json_decref(doc);
        free(b);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    b->len = (size_t)ftell(f);
    rewind(f);
    b->data = malloc(b->len + 1);
    if (!b->data || fread(b->data, 1, b->len, f) != b->len) b->len = 0;
    fclose(f);
    b->doc = doc;
    return b;
}

void em_test_bundle_free(em_test_bundle *b) {
    if (!b) return;
    json_decref(b->doc);
    free(b->data);
    free(b);
}

long long em_test_bundle_meta_int(em_test_bundle *b, const char *key, long long def) {
    json_t *v = json_object_get(json_object_get(b->doc, "meta"), key);
    if (json_is_integer(v)) return json_integer_value(v);
    if (json_is_boolean(v)) return json_is_true(v);
    return def;
}

double em_test_at(void *ctx, struct em_tensor *t, long long i) {
    em_ctx *c = ctx;
    double v = NAN;
    em_scope_push(c);
    em_item(c, em_slice(c, t, 0, i, i + 1, 1), &v);
    em_scope_pop(c);
    return v;
}

double em_test_bundle_meta_num(em_test_bundle *b, const char *key, double def) {
    json_t *v = json_object_get(json_object_get(b->doc, "meta"), key);
    return json_is_number(v) ? json_number_value(v) : def;
}

em_tensor *em_test_bundle_get(em_test_bundle *b, void *ctx, const char *name) {
    em_ctx *c = ctx;
    json_t *e = json_object_get(json_object_get(b->doc, "tensors"), name);
    em_dtype t;
    if (!e || !em_dtype_parse(json_string_value(json_object_get(e, "dtype")), &t)) {
        fprintf(stderr, "bundle has no tensor '%s'\n", name);
        em_test_failures++;
        return NULL;
    }
    json_t *sh = json_object_get(e, "shape");
    int nd = (int)json_array_size(sh);
    int64_t shape[8];
    for (int i = 0; i < nd && i < 8; i++) shape[i] = json_integer_value(json_array_get(sh, (size_t)i));
    size_t off = (size_t)json_integer_value(json_object_get(e, "offset"));
    size_t nb = (size_t)json_integer_value(json_object_get(e, "nbytes"));
    if (off + nb > b->len) {
        fprintf(stderr, "tensor '%s' lies outside the bundle data\n", name);
        em_test_failures++;
        return NULL;
    }
    return em_from_host(c, t, nd, shape, b->data + off);
}

bool em_test_allclose(void *ctx, em_tensor *got, em_tensor *want, double atol, double rtol,
                      const char *what) {
    em_ctx *c = ctx;
    em_test_checks++;
    if (!got || !want) {
        em_test_failures++;
        fprintf(stderr, "%s: missing tensor (%s)\n", what,
                em_ctx_error(c) ? em_ctx_error(c)->message : "no error recorded");
        return false;
    }
    int64_t n = em_tensor_numel(want);
    if (em_tensor_numel(got) != n || em_tensor_ndim(got) != em_tensor_ndim(want)) {
        char a[96], b[96];
        em_test_failures++;
        fprintf(stderr, "%s: got %s, want %s\n", what, em_tensor_sig(got, a, sizeof a),
                em_tensor_sig(want, b, sizeof b));
        return false;
    }
    float *g = malloc((size_t)(n + 1) * sizeof *g), *w = malloc((size_t)(n + 1) * sizeof *w);
    bool ok = g && w && em_to_host_f32(c, got, g, n) == EM_OK && em_to_host_f32(c, want, w, n) == EM_OK;
    double worst = 0;
    for (int64_t i = 0; ok && i < n; i++) {
        double e = fabs((double)g[i] - (double)w[i]);
        bool bad = (isnan(w[i]) != isnan(g[i])) || (!isnan(w[i]) && e > atol + rtol * fabs(w[i]));
        if (e > worst) worst = e;
        if (bad) {
            fprintf(stderr, "%s: element %lld: got %.8g, want %.8g (atol %g rtol %g)\n", what,
                    (long long)i, g[i], w[i], atol, rtol);
            ok = false;
        }
    }
    free(g);
    free(w);
    if (!ok) em_test_failures++;
    return ok;
}

const char *em_test_fixture_path(const char *sub, const char *rel) {
    static char buf[8][1024];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s/%s", em_test_fixtures_dir(), sub, rel);
    return b;
}

static char scratch[64];

const char *em_test_scratch_make(const char *tag) {
    snprintf(scratch, sizeof scratch, "/tmp/ember_%.20s_XXXXXX", tag);
    bool ok = mkdtemp(scratch) != NULL;
    CHECK_MSG(ok, "cannot make %s", scratch);
    return ok ? scratch : NULL;
}

const char *em_test_scratch_dir(void) { return scratch; }

const char *em_test_scratch_path(const char *rel) {
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", scratch, rel);
    return buf[k];
}

void em_test_scratch_write(const char *rel, const char *text) {
    FILE *f = fopen(em_test_scratch_path(rel), "w");
    CHECK_MSG(f != NULL, "cannot write %s", em_test_scratch_path(rel));
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

void em_test_scratch_link(const char *rel, const char *sub, const char *target) {
    char src[1024], cwd[512];
    const char *p = em_test_fixture_path(sub, target);
    if (p[0] == '/') {
        snprintf(src, sizeof src, "%s", p);
    } else {
        CHECK(getcwd(cwd, sizeof cwd) != NULL);
        snprintf(src, sizeof src, "%s/%s", cwd, p);
    }
    CHECK_MSG(symlink(src, em_test_scratch_path(rel)) == 0, "cannot link %s", src);
}

void em_test_scratch_remove(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    CHECK(scratch[0] && system(cmd) == 0);
}

char *em_test_read_file(const char *path, size_t *len) {
    em_ctx *c = em_ctx_create();
    size_t n = 0;
    char *buf = em_file_read(c, "test", path, SIZE_MAX / 2, &n, NULL);
    if (!buf) fprintf(stderr, "%s\n", em_ctx_error(c)->message);
    em_ctx_free(c);
    if (len) *len = n;
    return buf;
}

void *em_test_load_json(const char *path) {
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j) fprintf(stderr, "cannot read %s: %s\n", path, e.text);
    return j;
}

int32_t *em_test_host_tokens(em_ctx *c, em_tensor *t, int64_t *n) {
    *n = em_tensor_numel(t);
    int32_t *v = malloc((size_t)(*n + 1) * sizeof *v);
    if (v && em_to_host(c, em_cast(c, t, EM_I32), v, (size_t)*n * sizeof *v) != EM_OK) {
        free(v);
        return NULL;
    }
    return v;
}

bool em_test_greedy_matches(em_ctx *c, em_model *m, em_test_bundle *b, bool compile,
                            char *why, size_t why_n) {
    em_scope_push(c);
    int64_t n_ids = 0, n_want = 0;
    em_token *ids = em_test_host_tokens(c, em_test_bundle_get(b, c, "ids"), &n_ids);
    em_token *want = em_test_host_tokens(c, em_test_bundle_get(b, c, "greedy"), &n_want);
    int64_t plen = n_ids / 2;
    em_generate_params p = em_generate_default_params(m);
    p.max_new_tokens = n_want;
    p.do_sample = false;
    p.repetition_penalty = 1.0;
    p.eos_ids = ids; /* a non-NULL list of length 0: no eos stop (as the reference) */
    p.n_eos_ids = 0;
    p.compile = compile;
    const em_token *prompts[1] = {ids};
    em_generate_result r;
    bool ok = false;
    if (ids && want && em_generate(c, m, NULL, prompts, &plen, 1, &p, &r) == EM_OK) {
        ok = r.n_ids[0] == n_want && !memcmp(r.ids[0], want, (size_t)n_want * sizeof *want);
        if (!ok) snprintf(why, why_n, "greedy tokens differ from transformers%s",
                          compile ? " (compiled)" : "");
        em_generate_result_free(&r);
    } else {
        snprintf(why, why_n, "generate%s: %s", compile ? " (compiled)" : "",
                 em_ctx_status(c) ? em_ctx_error(c)->message : "no tokens");
    }
    free(ids);
    free(want);
    em_scope_pop(c);
    return ok;
}

int em_test_run_in_group(const em_test_case *tests, int n, int argc, char **argv,
                         em_dist **group) {
    em_ctx *c = em_ctx_create();
    if (em_dist_init(c, NULL, group) != EM_OK) {
        fprintf(stderr, "em_dist_init: %s\n", em_ctx_error(c)->message);
        em_ctx_free(c);
        return 1;
    }
    em_ctx_free(c);
    int rc = em_test_run(tests, n, argc, argv);
    em_dist_free(*group);
    *group = NULL;
    return rc;
}

em_device *em_test_xla_or_skip(em_ctx *c) {
    em_device *d = em_device_get(c, "xla:0");
    if (!d) {
        em_test_skip("no XLA PJRT plugin (%s); install xla-cpu-pjrt or set EMBER_PJRT_XLA_PLUGIN",
                     em_ctx_error(c)->message);
        em_ctx_clear_error(c);
    }
    return d;
}
