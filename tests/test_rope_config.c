/* em_rope_inv_freq against transformers' rope initialisation functions
 * (tests/fixtures/rope/inv_freq.json, written by scripts/gen_rope_fixtures.py). */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"

/* Distance in units in the last place between two finite floats of the same sign. */
static int64_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if ((ia < 0) != (ib < 0)) return a == b ? 0 : INT32_MAX;
    int64_t d = (int64_t)ia - (int64_t)ib;
    return d < 0 ? -d : d;
}

static bool parse_type(const char *s, em_rope_type *t) {
    static const struct {
        const char *name;
        em_rope_type t;
    } names[] = {{"default", EM_ROPE_DEFAULT}, {"linear", EM_ROPE_LINEAR},
                 {"dynamic", EM_ROPE_DYNAMIC}, {"llama3", EM_ROPE_LLAMA3}, {"yarn", EM_ROPE_YARN},
                 {"proportional", EM_ROPE_PROPORTIONAL}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (s && !strcmp(s, names[i].name)) {
            *t = names[i].t;
            return true;
        }
    return false;
}

static double num(json_t *o, const char *key, double dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

static void test_fixture(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/rope/inv_freq.json", em_test_fixtures_dir());
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECK_MSG(root != NULL, "%s: %s", path, je.text);
    if (!root) return;
    json_t *cases = json_object_get(root, "cases");
    CHECK(json_array_size(cases) >= 20);
    em_ctx *c = em_ctx_create();
    int64_t worst = 0;
    size_t i;
    json_t *cs;
    json_array_foreach(cases, i, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        json_t *jc = json_object_get(cs, "config");
        em_rope_config cfg = em_rope_config_default();
        CHECK_MSG(parse_type(json_string_value(json_object_get(jc, "type")), &cfg.type), "%s",
                  name);
        cfg.theta = num(jc, "theta", cfg.theta);
        cfg.head_dim = (int64_t)num(jc, "head_dim", 0);
        cfg.partial_rotary_factor = num(jc, "partial_rotary_factor", 1.0);
        cfg.factor = num(jc, "factor", cfg.factor);
        cfg.max_position_embeddings = (int64_t)num(jc, "max_position_embeddings", 0);
        cfg.original_max_position_embeddings =
            (int64_t)num(jc, "original_max_position_embeddings", 0);
        cfg.low_freq_factor = num(jc, "low_freq_factor", cfg.low_freq_factor);
        cfg.high_freq_factor = num(jc, "high_freq_factor", cfg.high_freq_factor);
        cfg.beta_fast = num(jc, "beta_fast", cfg.beta_fast);
        cfg.beta_slow = num(jc, "beta_slow", cfg.beta_slow);
        cfg.attention_factor = num(jc, "attention_factor", 0);
        cfg.mscale = num(jc, "mscale", 0);
        cfg.mscale_all_dim = num(jc, "mscale_all_dim", 0);
        json_t *tr = json_object_get(jc, "truncate");
        if (tr) cfg.truncate = json_is_true(tr);
        int64_t seq_len = (int64_t)num(cs, "seq_len", 0);

        json_t *want = json_object_get(cs, "inv_freq");
        float got[512], scaling = -1;
        int n = em_rope_inv_freq(c, &cfg, seq_len, got, 512, &scaling);
        CHECK_MSG(n == (int)json_array_size(want), "%s: %d frequencies, expected %d (%s)", name, n,
                  (int)json_array_size(want),
                  em_ctx_error(c) ? em_ctx_error(c)->message : "no error");
        if (n != (int)json_array_size(want)) {
            em_ctx_clear_error(c);
            continue;
        }
        int64_t case_worst = 0;
        for (int k = 0; k < n; k++) {
            float w = (float)json_number_value(json_array_get(want, (size_t)k));
            int64_t u = ulps(got[k], w);
            if (u > case_worst) case_worst = u;
            CHECK_MSG(u <= 1, "%s: inv_freq[%d] = %.9g, transformers %.9g (%lld ulp)", name, k,
                      got[k], w, (long long)u);
        }
        if (case_worst > worst) worst = case_worst;
        float ws = (float)num(cs, "attention_scaling", 0);
        CHECK_MSG(ulps(scaling, ws) <= 1, "%s: attention scaling %.9g, transformers %.9g", name,
                  scaling, ws);
    }
    fprintf(stderr, "rope inv_freq: %zu configs, worst difference %lld ulp\n",
            json_array_size(cases), (long long)worst);
    em_ctx_free(c);
    json_decref(root);
}

static void test_errors(void) {
    em_ctx *c = em_ctx_create();
    float f[64], s;
    em_rope_config cfg = em_rope_config_default();
    CHECK(cfg.type == EM_ROPE_DEFAULT && cfg.theta == 10000.0 && cfg.factor == 1.0 &&
          cfg.beta_fast == 32.0 && cfg.beta_slow == 1.0 && cfg.truncate &&
          cfg.partial_rotary_factor == 1.0);
    /* head_dim unset */
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == -1);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "rope_inv_freq", "head_dim");
    em_ctx_clear_error(c);
    /* odd rotary dimension */
    cfg.head_dim = 80;
    cfg.partial_rotary_factor = 0.3; /* int(24.0) = 24 is even; 0.35 gives 28; 0.3125 gives 25 */
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == 12);
    cfg.partial_rotary_factor = 0.3125;
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == -1);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "rotary dimension 25", "even");
    em_ctx_clear_error(c);
    cfg.partial_rotary_factor = 1.5;
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == -1);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "partial_rotary_factor 1.5");
    em_ctx_clear_error(c);
    /* output too small */
    cfg.partial_rotary_factor = 1.0;
    cfg.head_dim = 256;
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == -1);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "128 frequencies", "64");
    em_ctx_clear_error(c);
    /* linear without a factor, llama3 without lengths */
    cfg.head_dim = 64;
    cfg.type = EM_ROPE_LINEAR;
    cfg.factor = 0;
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == -1);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "linear", "factor");
    em_ctx_clear_error(c);
    cfg.type = EM_ROPE_LLAMA3;
    cfg.factor = 8;
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == -1);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "llama3", "original_max_position_embeddings");
    em_ctx_clear_error(c);
    /* proportional: any fraction in [0, 1], an even head, a positive factor */
    cfg = em_rope_config_default();
    cfg.type = EM_ROPE_PROPORTIONAL;
    cfg.head_dim = 30;
    cfg.partial_rotary_factor = 0.5; /* 7 angles of 15 */
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == 15 && f[6] > 0 && f[7] == 0 && s == 1.0f);
    cfg.head_dim = 31;
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == -1);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "proportional", "even head_dim");
    cfg.head_dim = 30;
    cfg.partial_rotary_factor = -0.5;
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == -1);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "proportional", "partial_rotary_factor -0.5");
    cfg.partial_rotary_factor = 0.25;
    cfg.factor = 0;
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == -1);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "proportional", "factor");
    cfg.factor = 1;
    cfg.head_dim = 256;
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == -1);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "128 frequencies", "64");
    cfg.type = (em_rope_type)9;
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == -1);
    /* a context holding an error is left alone (CHECK_ERR clears it, so check afterwards) */
    cfg = em_rope_config_default();
    cfg.head_dim = 64;
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, &s) == -1);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "unknown rope type 9");
    CHECK(em_rope_inv_freq(c, NULL, 0, f, 64, &s) == -1);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "NULL");
    em_ctx_clear_error(c);
    /* attention_scaling may be NULL */
    CHECK(em_rope_inv_freq(c, &cfg, 0, f, 64, NULL) == 32);
    CHECK(f[0] == 1.0f);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_fixture), T(test_errors))
