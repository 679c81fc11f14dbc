/* `ember tokenize`: text -> ids and ids -> text with a Hugging Face tokenizer. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "core/file_read.h"
#include "ember/core.h"
#include "ember/tokenizer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ember tokenize --tokenizer DIR_OR_FILE [--add-special-tokens]\n"
            "       ember tokenize --tokenizer DIR_OR_FILE --decode [--skip-special-tokens]\n\n"
            "Encodes the UTF-8 text read from stdin and prints its ids as one JSON array, or\n"
            "with --decode reads a JSON array of ids from stdin and prints their text (exactly,\n"
            "with no newline added).\n\n"
            "  --tokenizer PATH        a tokenizer.json, or a folder holding one (and maybe a\n"
            "                          tokenizer_config.json)\n"
            "  --add-special-tokens    let the post-processor add its special tokens (BOS, [CLS]...)\n"
            "  --decode                ids -> text\n"
            "  --skip-special-tokens   with --decode, leave special tokens out\n");
}

static int decode(em_ctx *c, em_tokenizer *tok, const char *in, size_t len, bool skip) {
    json_error_t je;
    json_t *arr = json_loadb(in, len, 0, &je);
    if (!json_is_array(arr)) {
        fprintf(stderr, "ember tokenize: --decode expects a JSON array of ids on stdin (%s)\n",
                arr ? "not an array" : je.text);
        json_decref(arr);
        return 1;
    }
    size_t n = json_array_size(arr);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) {
        json_decref(arr);
        fprintf(stderr, "ember tokenize: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > INT32_MAX) {
            fprintf(stderr, "ember tokenize: element %zu of the input is not a token id\n", i);
            free(ids);
            json_decref(arr);
            return 1;
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    json_decref(arr);
    size_t tl;
    char *text = em_tokenizer_decode(c, tok, ids, n, skip, &tl);
    free(ids);
    if (!text) {
        fprintf(stderr, "ember tokenize: %s\n", em_ctx_error(c)->message);
        return 1;
    }
    fwrite(text, 1, tl, stdout);
    em_free(text);
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL;
    bool add_special = false, do_decode = false, skip = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "--add-special-tokens"))
            add_special = true;
        else if (!strcmp(argv[i], "--decode"))
            do_decode = true;
        else if (!strcmp(argv[i], "--skip-special-tokens"))
            skip = true;
        else {
            fprintf(stderr, "ember tokenize: unknown option '%s'\n\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "ember tokenize: --tokenizer is required\n\n");
        usage(stderr);
        return 2;
    }
    em_ctx *c = em_ctx_create();
    if (!c) return 1;
    int rc = 1;
    em_tokenizer *tok = em_tokenizer_load(c, path);
    size_t len = 0;
    char *in = tok ? em_file_read(c, "tokenize", "-", SIZE_MAX / 2, &len, NULL) : NULL;
    if (!tok || !in) {
        fprintf(stderr, "ember tokenize: %s\n", em_ctx_error(c)->message);
    } else if (do_decode) {
        rc = decode(c, tok, in, len, skip);
    } else {
        int32_t *ids;
        size_t n;
        if (em_tokenizer_encode(c, tok, in, len, add_special, &ids, &n) != EM_OK) {
            fprintf(stderr, "ember tokenize: %s\n", em_ctx_error(c)->message);
        } else {
            putchar('[');
            for (size_t i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
            printf("]\n");
            em_free(ids);
            rc = 0;
        }
    }
    free(in);
    em_tokenizer_free(tok);
    em_ctx_free(c);
    return rc;
}
