/*
 * The tokenizer against the `tokenizers` library (fixtures from
 * scripts/gen_tokenizer_fixtures.py): the small tokenizers trained for the tests (always), the
 * real Qwen3 / Gemma 3 / Llama 3 tokenizers (when EMBER_SHARED_DATA is set), per code point
 * Unicode behaviour, error handling, configuration getters and concurrent use.
 * MiniLM's BERT tokenizer is checked by test_tokenizer_minilm.c.
 */
#include <dirent.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/tokenizer/tokenizer_impl.h"
#include "tokenizer_expect.h"

static json_t *texts_doc;
static void free_texts(void) { json_decref(texts_doc); }

/* The shared strings fixture, loaded once (freed at exit, before the leak check). */
static json_t *texts(void) {
    if (!texts_doc && (texts_doc = load_fixture_json("texts.json"))) atexit(free_texts);
    return texts_doc;
}

static char *read_fixture(const char *rel, size_t *len);

/* Loads fixture <name>.json; "model":"@<base>" stands for the model in <base>.json, spliced in
 * as text (jansson cannot hold the vocabulary: a token may be "\u0000"). */
static em_tokenizer *load_fixture(em_ctx *c, const char *name) {
    char rel[512], path[4096];
    snprintf(rel, sizeof rel, "%s.json", name);
    size_t len;
    char *doc = read_fixture(rel, &len);
    if (!doc) {
        fprintf(stderr, "  %s: cannot read %s\n", name, rel);
        return NULL;
    }
    em_tokenizer *t = NULL;
    char *ref = strstr(doc, "\"model\":\"@");
    if (ref) {
        ref += 8; /* the opening quote of "@<base>" */
        char *end = strchr(ref + 1, '"');
        snprintf(rel, sizeof rel, "%.*s.json", (int)(end - ref - 2), ref + 2);
        size_t blen;
        char *base = read_fixture(rel, &blen);
        if (base) {
            size_t head = (size_t)(ref - doc), tail = len - (size_t)(end + 1 - doc);
            char *full = malloc(head + blen + tail + 1);
            memcpy(full, doc, head);
            memcpy(full + head, base, blen);
            memcpy(full + head + blen, end + 1, tail);
            t = em_tokenizer_load_json(c, full, head + blen + tail, name);
            free(full);
            free(base);
        }
    } else {
        snprintf(rel, sizeof rel, "%s.json", name);
        fixture_path(path, sizeof path, rel);
        t = em_tokenizer_load(c, path); /* the file path, as users load */
    }
    free(doc);
    if (!t) fprintf(stderr, "  %s: %s\n", name, em_ctx_error(c) ? em_ctx_error(c)->message : "?");
    return t;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_trained_fixtures(void) {
    char dir[4096];
    fixture_path(dir, sizeof dir, "expected");
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d) return;
    char *names[256];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 256) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 5, ".json") || !strncmp(de->d_name, "real_", 5) ||
            !strncmp(de->d_name, "base_", 5) ||
            !strcmp(de->d_name, "unicode.json"))
            continue;
        names[n++] = strndup(de->d_name, l - 5);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    CHECK_MSG(n >= 40, "only %d fixture tokenizers found in %s", n, dir);
    em_ctx *c = em_ctx_create();
    tk_stats total = {0};
    for (int i = 0; i < n; i++) {
        char rel[512];
        snprintf(rel, sizeof rel, "expected/%s.json", names[i]);
        json_t *exp = load_fixture_json(rel);
        em_tokenizer *t = load_fixture(c, names[i]);
        CHECK_MSG(t && exp, "%s: cannot load", names[i]);
        if (t && exp) {
            tk_stats st = {0};
            check_expected(c, t, exp, texts(), names[i], &st);
            print_stats(names[i], &st);
            total.cases += st.cases, total.cases_ok += st.cases_ok;
            total.roundtrips += st.roundtrips, total.roundtrips_ok += st.roundtrips_ok;
            total.decodes += st.decodes, total.decodes_ok += st.decodes_ok;
            total.tokens += st.tokens, total.tokens_ok += st.tokens_ok;
            total.streams += st.streams, total.streams_ok += st.streams_ok;
            total.split_steps += st.split_steps, total.fallback_steps += st.fallback_steps;
            total.unstreamable += st.unstreamable;
        }
        em_ctx_clear_error(c);
        em_tokenizer_free(t);
        json_decref(exp);
        free(names[i]);
    }
    char label[64];
    snprintf(label, sizeof label, "all %d fixtures", n);
    print_stats(label, &total);
    /* the streaming check saw multi-byte characters split across ids */
    CHECK_MSG(total.streams > 100 && total.split_steps > 0,
              "%d streams, %d ids inside a character", total.streams, total.split_steps);
    em_ctx_free(c);
}

/* ---- the real tokenizers ---- */

static void check_config(const em_tokenizer *t, json_t *cfg, const char *label) {
    static const char *const keys[EM_SPECIAL_COUNT] = {"bos_token", "eos_token", "pad_token",
                                                       "unk_token", "sep_token", "cls_token",
                                                       "mask_token"};
    json_t *sp = json_object_get(cfg, "special");
    for (int i = 0; i < EM_SPECIAL_COUNT; i++) {
        json_t *e = json_object_get(sp, keys[i]);
        const char *got = em_tokenizer_special_token(t, (em_special_token)i);
        if (!e) {
            if (i != EM_SPECIAL_UNK) CHECK_MSG(!got, "%s: %s should be absent", label, keys[i]);
            continue;
        }
        const char *want = json_string_value(json_array_get(e, 0));
        json_t *wid = json_array_get(e, 1);
        CHECK_MSG(got && !strcmp(got, want), "%s: %s is \"%s\", want \"%s\"", label, keys[i],
                  got ? got : "(null)", want);
        CHECK_MSG(em_tokenizer_special_id(t, (em_special_token)i) ==
                      (json_is_integer(wid) ? (int32_t)json_integer_value(wid) : -1),
                  "%s: %s id %d", label, keys[i], em_tokenizer_special_id(t, (em_special_token)i));
    }
    CHECK(em_tokenizer_add_bos_token(t) == json_is_true(json_object_get(cfg, "add_bos_token")));
    CHECK(em_tokenizer_add_eos_token(t) == json_is_true(json_object_get(cfg, "add_eos_token")));
    bool has_tpl = json_is_string(json_object_get(cfg, "chat_template_sha256"));
    CHECK_MSG((em_tokenizer_chat_template(t, NULL) != NULL) == has_tpl,
              "%s: chat template %s", label, has_tpl ? "missing" : "unexpected");
}

static void test_real_tokenizers(void) {
    const char *data = getenv("EMBER_SHARED_DATA");
    if (!data || !*data) {
        em_test_skip("EMBER_SHARED_DATA is not set, so the real Qwen3 / Gemma 3 / Llama 3 "
                     "tokenizers are not checked");
        return;
    }
    static const char *const names[] = {"qwen3", "gemma3", "llama3"};
    em_ctx *c = em_ctx_create();
    for (size_t i = 0; i < 3; i++) {
        char dir[4096], rel[128];
        snprintf(dir, sizeof dir, "%s/tokenizers/%s", data, names[i]);
        snprintf(rel, sizeof rel, "expected/real_%s.json", names[i]);
        json_t *exp = load_fixture_json(rel);
        em_tokenizer *t = em_tokenizer_load(c, dir);
        CHECK_MSG(t && exp, "%s: %s", names[i],
                  em_ctx_error(c) ? em_ctx_error(c)->message : "no expectations");
        if (t && exp) {
            tk_stats st = {0};
            check_expected(c, t, exp, texts(), names[i], &st);
            check_config(t, json_object_get(exp, "config"), names[i]);
            print_stats(names[i], &st);
        }
        em_ctx_clear_error(c);
        em_tokenizer_free(t);
        json_decref(exp);
    }
    em_ctx_free(c);
}

/* ---- errors ---- */

static char *read_fixture(const char *rel, size_t *len) {
    char p[4096];
    fixture_path(p, sizeof p, rel);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

/* Loads `doc` and expects `status` with every needle in the message. */
static void expect_load_error(em_ctx *c, const char *doc, em_status status, const char *n1,
                              const char *n2) {
    em_tokenizer *t = em_tokenizer_load_json(c, doc, strlen(doc), "bad.json");
    CHECK_MSG(t == NULL, "loaded: %.200s", doc);
    em_tokenizer_free(t);
    if (n2) CHECK_ERR(c, status, "bad.json", n1, n2);
    else CHECK_ERR(c, status, "bad.json", n1);
}

/* A minimal valid tokenizer with one part replaced. */
static char *mini(const char *normalizer, const char *pre, const char *model, const char *post,
                  const char *decoder, const char *added) {
    char *s = malloc(8192);
    snprintf(s, 8192,
             "{\"version\":\"1.0\",\"added_tokens\":%s,\"normalizer\":%s,\"pre_tokenizer\":%s,"
             "\"post_processor\":%s,\"decoder\":%s,\"model\":%s}",
             added ? added : "[]", normalizer ? normalizer : "null", pre ? pre : "null",
             post ? post : "null", decoder ? decoder : "null",
             model ? model
                   : "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}");
    return s;
}

static void test_errors(void) {
    em_ctx *c = em_ctx_create();
    char *s;
    /* the minimal tokenizer itself is fine */
    s = mini(NULL, NULL, NULL, NULL, NULL, NULL);
    em_tokenizer *t = em_tokenizer_load_json(c, s, strlen(s), "ok.json");
    CHECK(t != NULL);
    int32_t *ids;
    size_t n;
    CHECK(em_tokenizer_encode(c, t, "abba", 4, true, &ids, &n) == EM_OK && n == 3 &&
          ids[0] == 2 && ids[1] == 1 && ids[2] == 0);
    em_free(ids);
    em_tokenizer_free(t);
    free(s);

    /* malformed JSON and truncations of a real fixture: an error, never a crash */
    expect_load_error(c, "", EM_ERR_FORMAT, "malformed JSON", NULL);
    expect_load_error(c, "{\"model\": ", EM_ERR_FORMAT, "malformed JSON", "line 1");
    expect_load_error(c, "[1, 2]", EM_ERR_FORMAT, "top level", NULL);
    expect_load_error(c, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,}, \"merges\": []}}",
                      EM_ERR_FORMAT, "malformed JSON", "line 1, column 44");
    expect_load_error(c, "{\"version\": \"1.0\"\n,\n\"truncation\": nul}", EM_ERR_FORMAT,
                      "malformed JSON", "line 3");
    size_t len;
    char *doc = read_fixture("bpe_bytelevel.json", &len);
    CHECK(doc != NULL);
    int truncations = 0;
    for (size_t cut = 0; doc && cut < len - 2; cut += len / 37 + 1) {
        char save = doc[cut];
        doc[cut] = 0;
        t = em_tokenizer_load_json(c, doc, cut, "bad.json");
        CHECK_MSG(t == NULL && em_ctx_status(c) == EM_ERR_FORMAT, "truncated at %zu", cut);
        CHECK_MSG(em_ctx_error(c) && strstr(em_ctx_error(c)->message, "bad.json"),
                  "truncated at %zu: %s", cut, em_ctx_error(c) ? em_ctx_error(c)->message : "");
        em_tokenizer_free(t);
        em_ctx_clear_error(c);
        doc[cut] = save;
        truncations++;
    }
    fprintf(stderr, "  %d truncations of bpe_bytelevel.json rejected\n", truncations);
    /* a truncated file on disk */
    char tmp[] = "/tmp/ember_tok_XXXXXX";
    int fd = mkstemp(tmp);
    if (fd >= 0 && doc) {
        CHECK(write(fd, doc, len / 2) == (ssize_t)(len / 2));
        close(fd);
        t = em_tokenizer_load(c, tmp);
        CHECK(t == NULL);
        CHECK_ERR(c, EM_ERR_FORMAT, tmp);
        unlink(tmp);
    }
    free(doc);

    /* not UTF-8 */
    expect_load_error(c, "{\"version\": \"1.0\", \"x\": \"\xC3\x28\"}", EM_ERR_FORMAT, "UTF-8",
                      "line 1");
    /* wrong types, one component at a time */
    const char *model_ok = "{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}";
    struct {
        char *doc;
        em_status st;
        const char *n1, *n2;
    } cases[] = {
        {mini("5", 0, 0, 0, 0, 0), EM_ERR_FORMAT, "normalizer", "expected an object"},
        {mini("{\"type\": \"FooNormalizer\"}", 0, 0, 0, 0, 0), EM_ERR_FORMAT,
         "unknown normalizer type \"FooNormalizer\"", NULL},
        {mini("{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"\"}", 0, 0, 0, 0, 0),
         EM_ERR_FORMAT, "precompiled_charsmap", "shorter than"},
        {mini("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": 3}]}",
              0, 0, 0, 0, 0),
         EM_ERR_FORMAT, "normalizer.normalizers[1]", "type"},
        {mini("{\"type\": \"Lowercase\"}", "{\"type\": \"UnicodeScripts\"}", 0, 0, 0, 0),
         EM_ERR_UNSUPPORTED, "pre_tokenizer", "UnicodeScripts"},
        {mini(0, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                 "\"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\", \"invert\": false}]}",
              0, 0, 0, 0),
         EM_ERR_FORMAT, "pre_tokenizer.pretokenizers[0]", "regex"},
        {mini(0, "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}",
              0, 0, 0, 0),
         EM_ERR_FORMAT, "pre_tokenizer", "behavior"},
        {mini(0, "{\"type\": \"Metaspace\", \"replacement\": \"ab\"}", 0, 0, 0, 0), EM_ERR_FORMAT,
         "pre_tokenizer", "one character"},
        {mini(0, "{\"type\": \"Metaspace\", \"replacement\": \"_\", \"add_prefix_space\": false}", 0,
              0, 0, 0),
         EM_ERR_FORMAT, "pre_tokenizer", "prepend_scheme"},
        {mini(0, "{\"type\": \"Whatever\"}", 0, 0, 0, 0), EM_ERR_FORMAT,
         "unknown pre-tokenizer type \"Whatever\"", NULL},
        {mini(0, 0, "{\"type\": \"BPE\", \"vocab\": {\"a\": \"zero\"}, \"merges\": []}", 0, 0, 0),
         EM_ERR_FORMAT, "model.vocab", "\"a\""},
        {mini(0, 0, "{\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}", 0, 0, 0),
         EM_ERR_FORMAT, "model.vocab", NULL},
        {mini(0, 0, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a c\"]}", 0, 0, 0),
         EM_ERR_FORMAT, "model.merges[0]", "\"c\""},
        {mini(0, 0, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}",
              0, 0, 0),
         EM_ERR_FORMAT, "model.merges[0]", "\"ab\""},
        {mini(0, 0, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}", 0, 0, 0),
         EM_ERR_FORMAT, "model.merges[0]", "space"},
        {mini(0, 0, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\", 1]]}", 0, 0,
              0),
         EM_ERR_FORMAT, "model.merges[0]", NULL},
        {mini(0, 0, "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}}", 0, 0, 0), EM_ERR_FORMAT,
         "model", "merges"},
        {mini(0, 0, "{\"type\": \"Magic\", \"vocab\": {}}", 0, 0, 0), EM_ERR_FORMAT,
         "unknown model type \"Magic\"", NULL},
        {mini(0, 0, "{\"type\": \"Unigram\", \"vocab\": [[\"a\", \"x\"]], \"unk_id\": 0}", 0, 0,
              0),
         EM_ERR_FORMAT, "model.vocab[0]", NULL},
        {mini(0, 0, "{\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0]], \"unk_id\": 4}", 0, 0,
              0),
         EM_ERR_FORMAT, "unk_id", NULL},
        {mini(0, 0, "{\"type\": \"WordPiece\", \"vocab\": [1, 2]}", 0, 0, 0), EM_ERR_FORMAT,
         "model.vocab", "object"},
        {mini(0, 0, "[]", 0, 0, 0), EM_ERR_FORMAT, "model", NULL},
        {mini(0, 0, model_ok,
              "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": "
              "\"[CLS]\", \"type_id\": 0}}], \"pair\": [], \"special_tokens\": {}}",
              0, 0),
         EM_ERR_FORMAT, "post_processor.single[0]", "[CLS]"},
        {mini(0, 0, model_ok, "{\"type\": \"BertProcessing\", \"sep\": [\"[SEP]\"], \"cls\": "
                              "[\"[CLS]\", 1]}", 0, 0),
         EM_ERR_FORMAT, "post_processor", "sep"},
        {mini(0, 0, model_ok, "{\"type\": \"Reverse\"}", 0, 0), EM_ERR_FORMAT,
         "unknown post-processor type \"Reverse\"", NULL},
        {mini(0, 0, model_ok, 0, "{\"type\": \"Strip\", \"content\": \" \", \"start\": -1}", 0),
         EM_ERR_FORMAT, "decoder", "start"},
        {mini(0, 0, model_ok, 0, "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Oops\"}]}",
              0),
         EM_ERR_FORMAT, "decoder.decoders[0]", "Oops"},
        {mini(0, 0, model_ok, 0, 0, "{}"), EM_ERR_FORMAT, "added_tokens", "array"},
        {mini(0, 0, model_ok, 0, 0, "[{\"id\": 3}]"), EM_ERR_FORMAT, "added_tokens[0]",
         "content"},
        {mini(0, 0, model_ok, 0, 0, "[{\"id\": 3, \"content\": \"x\", \"special\": \"yes\"}]"),
         EM_ERR_FORMAT, "added_tokens[0]", "special"},
        {strdup("{\"version\": \"2.0\", \"model\": {}}"), EM_ERR_FORMAT, "version", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        expect_load_error(c, cases[i].doc, cases[i].st, cases[i].n1, cases[i].n2);
        free(cases[i].doc);
    }
    fprintf(stderr, "  %zu malformed or unsupported tokenizers rejected with clear errors\n",
            sizeof cases / sizeof cases[0]);

    /* files and arguments */
    t = em_tokenizer_load(c, "/nonexistent/tokenizer");
    CHECK(t == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "/nonexistent/tokenizer");
    CHECK(em_tokenizer_load(c, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "NULL");
    s = mini(0, 0, 0, 0, 0, 0);
    t = em_tokenizer_load_json(c, s, strlen(s), "ok.json");
    free(s);
    CHECK(em_tokenizer_encode(c, t, "a\xFF" "b", 3, false, &ids, &n) == EM_ERR_INVALID_ARG &&
          ids == NULL && n == 0);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "UTF-8", "offset 1");
    CHECK(em_tokenizer_encode(c, NULL, "a", 1, false, &ids, &n) == EM_ERR_INVALID_ARG);
    em_ctx_clear_error(c);
    /* a context holding an error is left alone */
    em_ctx_fail(c, EM_ERR_SHAPE, "earlier", "first error");
    CHECK(em_tokenizer_encode(c, t, "a", 1, false, &ids, &n) == EM_ERR_SHAPE);
    CHECK(em_tokenizer_decode(c, t, NULL, 0, false, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "earlier");
    /* decode skips ids that name no token, as the library does */
    int32_t odd[] = {2, -5, 99, 1};
    char *txt = em_tokenizer_decode(c, t, odd, 4, false, NULL);
    CHECK(txt && !strcmp(txt, "ab b"));
    em_free(txt);
    CHECK(em_tokenizer_token_to_id(t, "zz", 2) == -1 && em_tokenizer_id_to_token(t, 77, NULL) == NULL);
    em_tokenizer_free(t);
    /* a model that cannot represent a character and has no unknown token */
    s = mini(0, 0, "{\"type\": \"WordLevel\", \"vocab\": {\"a\": 0}, \"unk_token\": \"<unk>\"}", 0,
             0, 0);
    t = em_tokenizer_load_json(c, s, strlen(s), "wl.json");
    free(s);
    CHECK(t && em_tokenizer_encode(c, t, "b", 1, false, &ids, &n) == EM_ERR_FORMAT);
    CHECK_ERR(c, EM_ERR_FORMAT, "WordLevel", "wl.json");
    em_tokenizer_free(t);
    em_ctx_free(c);
}

/* ---- configuration and concurrent use ---- */

static void write_file(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fputs(s, f);
    fclose(f);
}

static void test_config(void) {
    char dir[] = "/tmp/ember_tokcfg_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char p[4096];
    size_t len;
    char *doc = read_fixture("bpe_bytelevel.json", &len);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    write_file(p, doc);
    free(doc);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    write_file(p, "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<|im_start|>\"},"
                  " \"eos_token\": \"<|im_end|>\", \"pad_token\": null, \"add_bos_token\": true,"
                  " \"model_max_length\": 1000000000000000019884624838656,"
                  " \"chat_template\": [{\"name\": \"default\", \"template\": \"{{ x }}\"},"
                  " {\"name\": \"tool_use\", \"template\": \"{{ tools }}\"}]}");
    em_ctx *c = em_ctx_create();
    em_tokenizer *t = em_tokenizer_load(c, dir);
    CHECK_MSG(t != NULL, "%s", em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (t) {
        CHECK(!strcmp(em_tokenizer_special_token(t, EM_SPECIAL_BOS), "<|im_start|>"));
        CHECK(em_tokenizer_special_id(t, EM_SPECIAL_BOS) ==
              em_tokenizer_token_to_id(t, "<|im_start|>", 12));
        CHECK(em_tokenizer_special_id(t, EM_SPECIAL_EOS) >= 0);
        CHECK(!em_tokenizer_special_token(t, EM_SPECIAL_PAD) &&
              em_tokenizer_special_id(t, EM_SPECIAL_PAD) == -1);
        CHECK(em_tokenizer_add_bos_token(t) && !em_tokenizer_add_eos_token(t));
        CHECK(!strcmp(em_tokenizer_chat_template(t, NULL), "{{ x }}"));
        CHECK(!strcmp(em_tokenizer_chat_template(t, "tool_use"), "{{ tools }}"));
        CHECK(em_tokenizer_chat_template(t, "rag") == NULL);
    }
    em_tokenizer_free(t);
    /* chat_template.jinja overrides; loading the file path also reads the config */
    snprintf(p, sizeof p, "%s/chat_template.jinja", dir);
    write_file(p, "{% for m in messages %}{{ m.content }}{% endfor %}");
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    t = em_tokenizer_load(c, p);
    CHECK(t && !strcmp(em_tokenizer_chat_template(t, NULL),
                       "{% for m in messages %}{{ m.content }}{% endfor %}"));
    em_tokenizer_free(t);
    /* a malformed config is an error naming it */
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    write_file(p, "{\"bos_token\": 7}");
    t = em_tokenizer_load(c, dir);
    CHECK(t == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "tokenizer_config.json", "bos_token");
    const char *files[] = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
    em_ctx_free(c);
}

typedef struct worker {
    const em_tokenizer *t;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
    int bad;
} worker;

static void *encode_many(void *arg) {
    worker *w = arg;
    em_ctx *c = em_ctx_create();
    for (int r = 0; r < 20; r++) {
        int32_t *ids;
        size_t n;
        if (em_tokenizer_encode(c, w->t, w->text, w->len, true, &ids, &n) != EM_OK ||
            n != w->n || memcmp(ids, w->ids, n * sizeof *ids))
            w->bad++;
        em_free(ids);
    }
    em_ctx_free(c);
    return NULL;
}

static void test_threads(void) {
    em_ctx *c = em_ctx_create();
    em_tokenizer *t = load_fixture(c, "bpe_bytelevel");
    size_t len;
    char *text = read_fixture("corpus.txt", &len);
    worker w[4];
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(t && text && em_tokenizer_encode(c, t, text, len, true, &ids, &n) == EM_OK);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){t, text, len, ids, n, 0};
        pthread_create(&th[i], NULL, encode_many, &w[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(w[i].bad == 0, "thread %d: %d different encodings", i, w[i].bad);
    }
    em_free(ids);
    free(text);
    em_tokenizer_free(t);
    em_ctx_free(c);
}

/* ---- Unicode, per code point ---- */

static uint32_t fnv32(uint32_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x01000193u;
    return h;
}

/* Compares a predicate with the library's runs; prints the first few disagreements. */
static int check_class(const char *name, json_t *runs, bool (*pred)(uint32_t, void *),
                       void *arg) {
    size_t k = 0, nr = json_array_size(runs);
    bool want = false;
    int bad = 0;
    for (uint32_t cp = 1; cp < 0x110000; cp++) {
        while (k < nr && (uint32_t)json_integer_value(json_array_get(runs, k)) <= cp) {
            want = !want;
            k++;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        if (pred(cp, arg) != want && bad++ < 5)
            fprintf(stderr, "  unicode %s: U+%04X: tokenizers %d, ember %d\n", name, cp, want, !want);
    }
    CHECK_MSG(bad == 0, "unicode class %s: %d code points differ", name, bad);
    return bad;
}

static bool p_ws(uint32_t c, void *a) { return (void)a, tk_is_whitespace(c); }
static bool p_punct(uint32_t c, void *a) { return (void)a, tk_is_bert_punct(c); }
static bool p_num(uint32_t c, void *a) { return (void)a, tk_is_numeric(c); }
static bool p_word(uint32_t c, void *a) { return (void)a, tk_is_word_char(c); }

typedef struct rx_arg {
    tk_regex re;
    tk_rx_state st;
    tk_spans sp;
} rx_arg;

static bool p_regex(uint32_t c, void *a) {
    rx_arg *r = a;
    char s[8], err[256];
    s[0] = 1;
    size_t k = tk_utf8_encode(c, s + 1);
    s[k + 1] = 1;
    if (!tk_regex_find_matches(&r->st, &r->re, s, k + 2, &r->sp, err, sizeof err)) return false;
    for (size_t i = 0; i < r->sp.n; i++)
        if (r->sp.v[i].match && r->sp.v[i].start == 1 && r->sp.v[i].end == k + 1) return true;
    return false;
}

/* The output of one mapping for one code point, as the library's normalizers produce it. */
static void map_cp(tk_enc *e, const char *name, uint32_t cp, tk_buf *out) {
    char s[4];
    size_t k = tk_utf8_encode(cp, s);
    out->len = 0;
    bool lead;
    if (!strcmp(name, "nfd")) tk_normalize_form(TK_NFD, s, k, out);
    else if (!strcmp(name, "nfc")) tk_normalize_form(TK_NFC, s, k, out);
    else if (!strcmp(name, "nfkd")) tk_normalize_form(TK_NFKD, s, k, out);
    else if (!strcmp(name, "nfkc")) tk_normalize_form(TK_NFKC, s, k, out);
    else {
        tk_norm n = {0};
        if (!strcmp(name, "lower")) n.type = TK_NORM_LOWERCASE;
        else if (!strcmp(name, "strip_accents")) n.type = TK_NORM_STRIP_ACCENTS;
        else if (!strcmp(name, "bert_clean")) n.type = TK_NORM_BERT, n.clean_text = true;
        else if (!strcmp(name, "bert_strip")) n.type = TK_NORM_BERT, n.strip_accents = true;
        tk_normalize(e, &n, s, k, out, &lead);
    }
}

static void test_unicode(void) {
    json_t *u = load_fixture_json("expected/unicode.json");
    CHECK(u != NULL);
    if (!u) return;
    json_t *cls = json_object_get(u, "classes");
    int bad = check_class("whitespace", json_object_get(cls, "whitespace"), p_ws, NULL);
    bad += check_class("punct", json_object_get(cls, "punct"), p_punct, NULL);
    bad += check_class("numeric", json_object_get(cls, "numeric"), p_num, NULL);
    bad += check_class("word", json_object_get(cls, "word"), p_word, NULL);
    /* PCRE2 (with UCP) against Oniguruma on the classes tokenizer regexes use */
    json_t *rx = json_object_get(u, "regex");
    const char *names[] = {"L", "N", "s", "w", "L_in", "N_in", "s_in", "w_in"};
    const char *pats[] = {"\\p{L}", "\\p{N}", "\\s", "\\w",
                          "[\\p{L}]", "[\\p{N}]", "[\\s]", "[\\w]"};
    int rx_bad = 0;
    for (int i = 0; i < 8; i++) {
        rx_arg a = {0};
        char err[256];
        CHECK(tk_regex_compile(&a.re, pats[i], strlen(pats[i]), false, err, sizeof err));
        char label[32];
        snprintf(label, sizeof label, "regex %s", pats[i]);
        rx_bad += check_class(label, json_object_get(rx, names[i]), p_regex, &a);
        tk_regex_free(&a.re);
        tk_rx_state_free(&a.st);
        free(a.sp.v);
    }
    /* mappings, hashed per block of 4096 code points */
    json_t *maps = json_object_get(u, "maps");
    const char *key;
    json_t *hashes;
    em_ctx *c = em_ctx_create();
    em_tokenizer dummy = {.name = "unicode"};
    tk_enc e = {.c = c, .t = &dummy};
    tk_buf out = {0};
    int map_bad = 0;
    json_object_foreach(maps, key, hashes) {
        for (uint32_t blk = 0; blk < 0x110; blk++) {
            uint32_t h = 0x811c9dc5u;
            for (uint32_t cp = blk * 4096; cp < blk * 4096 + 4096; cp++) {
                if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
                map_cp(&e, key, cp, &out);
                h = fnv32(h, out.p ? out.p : "", out.len);
                h = fnv32(h, "", 1);
            }
            uint32_t want = (uint32_t)json_integer_value(json_array_get(hashes, blk));
            if (h != want) {
                map_bad++;
                fprintf(stderr, "  unicode %s: block U+%05X..U+%05X differs from tokenizers\n",
                        key, blk * 4096, blk * 4096 + 4095);
            }
        }
    }
    CHECK_MSG(map_bad == 0, "%d blocks of Unicode mappings differ", map_bad);
    if (bad || map_bad || rx_bad)
        fprintf(stderr, "  (src/io/tokenizer/tokenizer_unicode_fixups.h corrects the utf8proc and PCRE2 it was "
                        "generated with; with other versions regenerate it: "
                        "/opt/refvenv/bin/python scripts/gen_tokenizer_fixtures.py --unicode)\n");
    fprintf(stderr, "  unicode: 4 classes, 8 regex classes, 8 mappings over all code points: "
                    "%d classes, "
                    "%d mapping blocks differ; PCRE2 vs Oniguruma classes: %d code points "
                    "differ\n", bad, map_bad, rx_bad);
    tk_buf_free(&out);
    tk_enc_free(&e);
    em_ctx_free(c);
    json_decref(u);
}

EM_TEST_MAIN(T(test_trained_fixtures), T(test_real_tokenizers), T(test_errors), T(test_config),
             T(test_threads), T(test_unicode))
