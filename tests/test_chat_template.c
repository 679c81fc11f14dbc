/* Chat templates against renderings made by the real jinja2 as transformers configures it
 * (scripts/gen_chat_fixtures.py): the templates of tests/fixtures/chat/templates, error cases,
 * and — when EMBER_SHARED_DATA is set — the chat templates of real checkpoints. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "harness.h"
#include "io/jinja/jinja.h"

static json_t *load_fixture(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/chat/%s", em_test_fixtures_dir(), name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    CHECK_MSG(j != NULL, "%s: %s (run scripts/gen_chat_fixtures.py)", path, je.text);
    return j;
}

static char *dumps(json_t *j) {
    return j && !json_is_null(j) ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
}

/* Compares a rendering with the expected text; on mismatch shows where they part. */
static void check_text(const char *what, const char *got, const char *want) {
    em_test_checks++;
    if (got && !strcmp(got, want)) return;
    em_test_failures++;
    if (!got) {
        fprintf(stderr, "%s: no output\n", what);
        return;
    }
    size_t i = 0;
    while (got[i] && got[i] == want[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "%s: output differs at byte %zu\n  want: \"%.80s\"\n  got:  \"%.80s\"\n", what,
            i, want + from, got + from);
}

/* Renders like the fixtures: messages, add_generation_prompt and extra variables as JSON. */
static char *render(em_ctx *c, const em_chat_template *t, json_t *messages, bool agp,
                    json_t *extra) {
    char *m = dumps(messages), *x = dumps(extra);
    char *out = em_chat_template_render(c, t, m, agp, x);
    free(m);
    free(x);
    return out;
}

static void test_fixture_templates(void) {
    json_t *fx = load_fixture("expected.json");
    if (!fx) return;
    json_t *convs = json_object_get(fx, "conversations"), *extras = json_object_get(fx, "extras");
    em_ctx *c = em_ctx_create();
    const char *cur_name = NULL;
    em_chat_template *t = NULL;
    size_t k, rendered = 0, refused = 0;
    json_t *cs;
    json_array_foreach(json_object_get(fx, "cases"), k, cs) {
        const char *name = json_string_value(json_object_get(cs, "template"));
        if (!cur_name || strcmp(cur_name, name)) {
            em_chat_template_free(t);
            char path[1024];
            snprintf(path, sizeof path, "%s/chat/templates/%s", em_test_fixtures_dir(), name);
            char *src = em_test_read_file(path, NULL);
            CHECK_MSG(src != NULL, "cannot read %s", path);
            t = src ? em_chat_template_compile(c, src) : NULL;
            CHECK_MSG(t != NULL, "%s: %s", name, em_ctx_error(c) ? em_ctx_error(c)->message : "");
            em_ctx_clear_error(c);
            free(src);
            cur_name = name;
        }
        if (!t) continue;
        const char *conv = json_string_value(json_object_get(cs, "conversation"));
        const char *extra = json_string_value(json_object_get(cs, "extra"));
        bool agp = json_is_true(json_object_get(cs, "add_generation_prompt"));
        char what[256];
        snprintf(what, sizeof what, "%s / %s / %s / add_generation_prompt=%d", name, conv, extra,
                 agp);
        char *out = render(c, t, json_object_get(convs, conv), agp, json_object_get(extras, extra));
        json_t *want = json_object_get(cs, "output");
        if (want) {
            if (!out) fprintf(stderr, "%s: %s\n", what, em_ctx_error(c)->message);
            check_text(what, out, json_string_value(want));
            rendered++;
        } else {
            /* jinja2 refused this input (raise_exception in these fixtures): so must Ember,
             * with the template's own words */
            const char *msg = json_string_value(json_object_get(cs, "error"));
            CHECK_MSG(out == NULL, "%s: rendered although jinja2 raised %s", what, msg);
            if (!out) CHECK_ERR(c, EM_ERR_INVALID_ARG, msg);
            refused++;
        }
        em_ctx_clear_error(c);
        em_free(out);
    }
    fprintf(stderr, "  %zu renderings compared, %zu refusals matched\n", rendered, refused);
    em_chat_template_free(t);
    em_ctx_free(c);
    json_decref(fx);
}

/* One-line templates for semantic corner cases (Python operators, Markup, generators, loop
 * quirks, formatting), each rendered over the "snippets" conversation. */
static void test_snippets(void) {
    json_t *fx = load_fixture("expected.json");
    if (!fx) return;
    json_t *conv = json_object_get(json_object_get(fx, "conversations"), "snippets");
    em_ctx *c = em_ctx_create();
    size_t k, n = 0;
    json_t *sn;
    json_array_foreach(json_object_get(fx, "snippets"), k, sn) {
        const char *src = json_string_value(json_object_get(sn, "source"));
        em_chat_template *t = em_chat_template_compile(c, src);
        char *out = t ? render(c, t, conv, true, NULL) : NULL;
        json_t *want = json_object_get(sn, "output");
        char what[200];
        snprintf(what, sizeof what, "snippet %zu: %.150s", k, src);
        if (want) {
            if (!out) fprintf(stderr, "%s: %s\n", what, em_ctx_error(c)->message);
            check_text(what, out, json_string_value(want));
        } else {
            CHECK_MSG(out == NULL, "%s: rendered \"%s\" although jinja2 raised %s", what,
                      out ? out : "", json_string_value(json_object_get(sn, "error")));
        }
        em_ctx_clear_error(c);
        em_free(out);
        em_chat_template_free(t);
        n++;
    }
    fprintf(stderr, "  %zu snippets compared\n", n);
    em_ctx_free(c);
    json_decref(fx);
}

static em_status status_named(const char *s) {
    if (!strcmp(s, "format")) return EM_ERR_FORMAT;
    if (!strcmp(s, "unsupported")) return EM_ERR_UNSUPPORTED;
    if (!strcmp(s, "overflow")) return EM_ERR_OVERFLOW;
    return EM_ERR_INVALID_ARG;
}

static void test_error_cases(void) {
    json_t *fx = load_fixture("errors.json"), *ex = load_fixture("expected.json");
    if (!fx || !ex) {
        json_decref(fx);
        json_decref(ex);
        return;
    }
    json_t *conv = json_object_get(json_object_get(ex, "conversations"),
                                   json_string_value(json_object_get(fx, "conversation")));
    json_t *extra = json_object_get(json_object_get(ex, "extras"),
                                    json_string_value(json_object_get(fx, "extra")));
    em_ctx *c = em_ctx_create();
    size_t k;
    json_t *cs;
    json_array_foreach(json_object_get(fx, "cases"), k, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        em_chat_template *t =
            em_chat_template_compile(c, json_string_value(json_object_get(cs, "source")));
        char *out = t ? render(c, t, conv, true, extra) : NULL;
        CHECK_MSG(out == NULL, "%s: rendered \"%s\" instead of failing", name, out ? out : "");
        const em_error *e = em_ctx_error(c);
        em_status want = status_named(json_string_value(json_object_get(cs, "status")));
        em_test_checks++;
        if (!e || e->status != want) {
            em_test_failures++;
            fprintf(stderr, "%s: expected %s, got %s\n", name, em_status_str(want),
                    e ? e->message : "no error");
        } else {
            size_t q;
            json_t *needle;
            json_array_foreach(json_object_get(cs, "needles"), q, needle) {
                CHECK_MSG(strstr(e->message, json_string_value(needle)) != NULL,
                          "%s: message lacks \"%s\": %s", name, json_string_value(needle),
                          e->message);
            }
        }
        em_ctx_clear_error(c);
        em_free(out);
        em_chat_template_free(t);
    }
    em_ctx_free(c);
    json_decref(fx);
    json_decref(ex);
}

static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static void test_real_templates(void) {
    const char *data = getenv("EMBER_SHARED_DATA");
    if (!data || !*data) {
        em_test_skip("EMBER_SHARED_DATA is not set, the chat templates of real checkpoints "
                     "(qwen3, gemma3, llama3) are not checked");
        return;
    }
    json_t *fx = load_fixture("real.json");
    if (!fx) return;
    json_t *convs = json_object_get(fx, "conversations");
    em_ctx *c = em_ctx_create();
    const char *fam;
    json_t *f;
    json_object_foreach(json_object_get(fx, "families"), fam, f) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tokenizers/%s/tokenizer_config.json", data, fam);
        json_error_t je;
        /* model_max_length can exceed 64 bits (llama3: 1e30): read big integers as reals */
        json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
        CHECK_MSG(cfg != NULL, "%s: %s", path, je.text);
        if (!cfg) continue;
        const char *src = json_string_value(json_object_get(cfg, "chat_template"));
        CHECK_MSG(src != NULL, "%s has no chat_template string", path);
        char fp[32];
        snprintf(fp, sizeof fp, "%016llx", (unsigned long long)fnv1a64(src ? src : ""));
        const char *want_fp = json_string_value(json_object_get(f, "template_fnv1a64"));
        CHECK_MSG(src && !strcmp(fp, want_fp),
                  "%s: the chat template differs from the one the fixtures were made from "
                  "(fingerprint %s, fixtures %s): rerun scripts/gen_chat_fixtures.py",
                  path, fp, want_fp);
        em_chat_template *t = src ? em_chat_template_compile(c, src) : NULL;
        CHECK_MSG(t != NULL, "%s: %s", fam, em_ctx_error(c) ? em_ctx_error(c)->message : "");
        em_ctx_clear_error(c);
        size_t k, n = 0;
        json_t *cs;
        json_array_foreach(t ? json_object_get(f, "cases") : NULL, k, cs) {
            /* the variables apply_chat_template passes: special tokens, then keyword arguments */
            json_t *extra = json_deep_copy(json_object_get(f, "special_tokens_map"));
            json_t *kw = json_object_get(cs, "kwargs");
            if (json_is_object(kw)) json_object_update(extra, kw);
            const char *conv = json_string_value(json_object_get(cs, "conversation"));
            bool agp = json_is_true(json_object_get(cs, "add_generation_prompt"));
            char *kws = dumps(kw);
            char what[256];
            snprintf(what, sizeof what, "%s / %s / %s / add_generation_prompt=%d", fam, conv,
                     kws ? kws : "{}", agp);
            free(kws);
            char *out = render(c, t, json_object_get(convs, conv), agp, extra);
            json_t *want = json_object_get(cs, "output");
            if (want) {
                if (!out) fprintf(stderr, "%s: %s\n", what, em_ctx_error(c)->message);
                check_text(what, out, json_string_value(want));
            } else {
                CHECK_MSG(out == NULL, "%s: rendered although transformers raised", what);
            }
            em_ctx_clear_error(c);
            em_free(out);
            json_decref(extra);
            n++;
        }
        fprintf(stderr, "  %s: %zu renderings compared with transformers\n", fam, n);
        em_chat_template_free(t);
        json_decref(cfg);
    }
    em_ctx_free(c);
    json_decref(fx);
}

/* ---- the API contract ---- */

static const char *MSGS = "[{\"role\":\"user\",\"content\":\"hi\"}]";

static char *render_src(em_ctx *c, const char *src, const char *msgs, const char *extra) {
    em_chat_template *t = em_chat_template_compile(c, src);
    char *out = t ? em_chat_template_render(c, t, msgs, true, extra) : NULL;
    em_chat_template_free(t);
    return out;
}

static void test_api_errors(void) {
    em_ctx *c = em_ctx_create();
    CHECK(em_chat_template_compile(c, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "chat_template", "NULL");
    CHECK(em_chat_template_compile(c, "abc\xff") == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "not valid UTF-8", "byte 3");
    em_chat_template *t = em_chat_template_compile(c, "{{ messages[0].content }}");
    CHECK(t != NULL);
    CHECK(em_chat_template_render(c, NULL, MSGS, false, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "template");
    CHECK(em_chat_template_render(c, t, NULL, false, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "messages_json");
    CHECK(em_chat_template_render(c, t, "[{\"role\":", false, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "messages_json", "line 1");
    CHECK(em_chat_template_render(c, t, "{\"role\":\"user\"}", false, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "JSON array");
    CHECK(em_chat_template_render(c, t, "[]", false, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "empty conversation");
    CHECK(em_chat_template_render(c, t, "[\"hi\"]", false, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "JSON object");
    CHECK(em_chat_template_render(c, t, MSGS, false, "[1]") == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "extra_vars_json must be a JSON object");
    CHECK(em_chat_template_render(c, t, MSGS, false, "{\"messages\":[]}") == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "may not set");
    CHECK(em_chat_template_render(c, t, MSGS, false, "{bad json}") == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "extra_vars_json");
    /* a template is reusable, also after a failed render */
    char *a = em_chat_template_render(c, t, MSGS, false, NULL);
    char *b =
        em_chat_template_render(c, t, "[{\"role\":\"user\",\"content\":\"second\"}]", false, NULL);
    CHECK(a && !strcmp(a, "hi"));
    CHECK(b && !strcmp(b, "second"));
    em_free(a);
    em_free(b);
    em_chat_template_free(t);
    em_chat_template_free(NULL);
    /* positions: line and column of the failing construct */
    CHECK(render_src(c, "line one\n{{ messages[0].content + 1 }}", MSGS, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "line 2, column 24", "TypeError");
    CHECK(render_src(c, "a\nb\n  {% if %}", MSGS, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "line 3, column 9");
    /* U+0000 cannot travel in a C string */
    CHECK(render_src(c, "{{ messages[0].content }}",
                     "[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]", NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "U+0000");
    /* a context that holds an error keeps it: both calls return NULL and record nothing */
    em_ctx_fail(c, EM_ERR_IO, "earlier", "first failure");
    CHECK(em_chat_template_compile(c, "ok") == NULL);
    t = NULL;
    CHECK_ERR(c, EM_ERR_IO, "first failure");
    t = em_chat_template_compile(c, "ok");
    em_ctx_fail(c, EM_ERR_IO, "earlier", "first failure");
    CHECK(em_chat_template_render(c, t, MSGS, false, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_IO, "first failure");
    em_chat_template_free(t);
    em_ctx_free(c);
}

static void test_strftime_now(void) {
    em_ctx *c = em_ctx_create();
    char *out = render_src(c, "{{ strftime_now('%Y-%m-%d') }}|{{ strftime_now('') }}|", MSGS, NULL);
    CHECK(out && strlen(out) == 12 && out[4] == '-' && out[7] == '-' && out[10] == '|');
    em_free(out);
    em_ctx_free(c);
}

/* Hostile templates end with a clear error, under tight limits as the fuzzer uses. */
static void test_limits(void) {
    em_ctx *c = em_ctx_create();
    jinja_limits lim = jinja_default_limits();
    lim.max_output = 1000;
    lim.max_steps = 20000;
    lim.max_memory = 8u << 20;
    struct {
        const char *src;
        em_status status;
        const char *needle;
    } cases[] = {
        {"{% for i in range(1000) %}0123456789{% endfor %}", EM_ERR_OVERFLOW, "exceeds 1000 bytes"},
        {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
         EM_ERR_OVERFLOW, "evaluation steps"},
        {"{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", EM_ERR_OVERFLOW, "macro calls"},
        {"{{ 'x' * 100000 }}", EM_ERR_OVERFLOW, "output limit"},
        {"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
         "{% endfor %}",
         EM_ERR_OVERFLOW, "limit"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        em_chat_template *t = em_chat_template_compile(c, cases[k].src);
        CHECK(t != NULL);
        if (!t) continue;
        jinja_template_set_limits(t, &lim);
        char *out = em_chat_template_render(c, t, MSGS, false, NULL);
        CHECK_MSG(out == NULL, "case %zu rendered", k);
        CHECK_ERR(c, cases[k].status, cases[k].needle);
        em_free(out);
        em_chat_template_free(t);
    }
    /* nesting that would exhaust the C stack is refused at compile time */
    char deep[4000];
    size_t n = 0;
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{{ ");
    for (int k = 0; k < 600; k++) deep[n++] = '(';
    deep[n++] = '1';
    for (int k = 0; k < 600; k++) deep[n++] = ')';
    snprintf(deep + n, sizeof deep - n, " }}");
    CHECK(em_chat_template_compile(c, deep) == NULL);
    CHECK_ERR(c, EM_ERR_OVERFLOW, "nest");
    /* long operator chains are fine up to the height limit, then refused */
    char *chain = malloc(20000);
    n = (size_t)sprintf(chain, "{{ 0");
    for (int k = 0; k < 2000; k++) n += (size_t)sprintf(chain + n, "+1");
    sprintf(chain + n, " }}");
    CHECK(em_chat_template_compile(c, chain) == NULL);
    CHECK_ERR(c, EM_ERR_OVERFLOW, "deep");
    n = (size_t)sprintf(chain, "{{ 0");
    for (int k = 0; k < 300; k++) n += (size_t)sprintf(chain + n, "+1");
    sprintf(chain + n, " }}");
    char *out = render_src(c, chain, MSGS, NULL);
    CHECK(out && !strcmp(out, "300"));
    em_free(out);
    free(chain);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_fixture_templates), T(test_snippets), T(test_error_cases),
             T(test_real_templates), T(test_api_errors), T(test_strftime_now), T(test_limits))
