/*
 * JSON mode's recognizer (src/generate/json_grammar.c) on RFC 8259's grammar: documents valid
 * by the RFC are accepted byte by byte and complete only at their last byte (every prefix of a
 * valid document is accepted, so masking never paints decoding into a corner); documents the RFC
 * rejects fail at the first byte that makes them invalid; the top level must be an object (what
 * response_format json_object promises); whitespace runs and nesting are bounded.
 */
#include <string.h>

#include "generate/json_grammar.h"
#include "harness.h"

/* Feeds doc one byte at a time: the index of the first refused byte, or -1 if all are taken
 * (then *complete says whether the object is complete; a valid document must not be earlier). */
static int first_refused(const char *doc, bool valid, bool *complete) {
    em_json_state s;
    em_json_init(&s);
    for (size_t i = 0; doc[i]; i++) {
        if (!em_json_feed(&s, doc + i, 1)) return (int)i;
        if (valid && doc[i + 1] && em_json_complete(&s))
            CHECK_MSG(false, "'%s' complete after byte %zu, before its end", doc, i);
    }
    *complete = em_json_complete(&s);
    return -1;
}

static void test_valid_documents(void) {
    static const char *const docs[] = {
        "{}", " {}", "{ }", "{\"a\":1}", "{\"a\": -0.5e+10, \"b\": [true, false, null]}",
        "{\"k\":{\"n\":{\"m\":[[],[{}],[1,2,3]]}}}", "{\"s\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\"}",
        "{\"u\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}", "{\"z\":0,\"y\":0.0,\"x\":1E5,\"w\":-12e-3}",
        "{\n  \"a\": [\n    1,\n    2\n  ]\n}", "{\"\":\"\"}", "{\"a\":[0]}", "{\"n\":-0}",
        "{\"e\":1e1 }", "{\"a\":[1 ,2 ]}",
    };
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
        bool complete = false;
        int at = first_refused(docs[i], true, &complete);
        CHECK_MSG(at < 0, "valid '%s' refused at byte %d", docs[i], at);
        CHECK_MSG(complete, "valid '%s' not complete at its end", docs[i]);
    }
}

static void test_invalid_documents(void) {
    static const struct {
        const char *doc;
        int at; /* the first byte that cannot continue a JSON object */
    } cases[] = {
        {"[]", 0},            /* the top level must be an object */
        {"\"a\"", 0},
        {"1", 0},
        {"{a:1}", 1},         /* keys are strings */
        {"{\"a\" 1}", 5},     /* a colon after the key */
        {"{\"a\":}", 5},
        {"{\"a\":1,}", 7},    /* no trailing comma */
        {"{\"a\":[1,]}", 8},
        {"{\"a\":01}", 6},    /* no leading zeros */
        {"{\"a\":-}", 6},
        {"{\"a\":1.}", 7},
        {"{\"a\":.5}", 5},
        {"{\"a\":1e}", 7},
        {"{\"a\":+1}", 5},
        {"{\"a\":tru}", 8},
        {"{\"a\":nul1}", 8},
        {"{\"a\":True}", 5},
        {"{\"a\":\"\\x\"}", 7},  /* unknown escape */
        {"{\"a\":\"\\u12g4\"}", 10},
        {"{\"a\":\"\n\"}", 6},   /* raw control characters in strings */
        {"{\"a\":[}", 6},        /* mismatched brackets */
        {"{\"a\":1]", 6},
        {"{}}", 2},              /* nothing after the object */
        {"{} ", 2},
        {"{}{}", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bool complete = false;
        int at = first_refused(cases[i].doc, false, &complete);
        CHECK_MSG(at == cases[i].at, "'%s' refused at byte %d, expected %d", cases[i].doc, at,
                  cases[i].at);
    }
}

static void test_limits_and_chunks(void) {
    em_json_state s;
    em_json_init(&s);
    char deep[EM_JSON_MAX_DEPTH + 8];
    memset(deep, '[', sizeof deep);
    deep[0] = '{';
    CHECK(em_json_feed(&s, "{\"a\":", 5));
    /* depth 1 is the object: EM_JSON_MAX_DEPTH - 1 arrays fit, one more does not */
    CHECK(em_json_feed(&s, deep + 1, EM_JSON_MAX_DEPTH - 1));
    CHECK(!em_json_feed(&s, "[", 1));
    em_json_init(&s);
    char spaces[EM_JSON_MAX_SPACE + 1];
    memset(spaces, ' ', sizeof spaces);
    CHECK(em_json_feed(&s, spaces, EM_JSON_MAX_SPACE));
    CHECK(!em_json_feed(&s, " ", 1));
    /* a multi-byte chunk (a token) is taken or refused as a whole */
    em_json_init(&s);
    CHECK(em_json_feed(&s, "{\"key\": [1", 10));
    em_json_state copy = s;
    CHECK(!em_json_feed(&copy, "}]", 2)); /* ']' must close the array first */
    CHECK(em_json_feed(&s, "]}", 2) && em_json_complete(&s));
}

EM_TEST_MAIN(T(test_valid_documents), T(test_invalid_documents), T(test_limits_and_chunks))
