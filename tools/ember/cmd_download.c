/* `ember download ID [FILES...]`: fetches a model (or some of its files) into the Hub cache and
 * prints the local directory, like `hf download` does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ember/ember.h"
#include "ember/hub.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ember download [options] ID [FILES...]\n\n"
            "ID is a Hub id (org/name, org/name@revision with a branch, tag or commit) or a local\n"
            "directory. Without FILES, fetches what a model needs: config.json, the generation and\n"
            "tokenizer files it has, and model.safetensors (or its index and every shard). With\n"
            "FILES, fetches those files (all required). Prints the directory holding them.\n\n"
            "Files go to the Hugging Face cache (HF_HUB_CACHE, else HF_HOME/hub, else\n"
            "~/.cache/huggingface/hub) in the layout huggingface_hub uses, so models downloaded\n"
            "by the Python tools are used in place.\n\n"
            "options:\n"
            "  --cache-dir DIR   use this cache instead\n"
            "  --offline         never use the network (as HF_HUB_OFFLINE=1)\n"
            "  --quiet           no progress bar\n\n"
            "Environment: HF_ENDPOINT, HF_TOKEN (gated and private repos), HF_TOKEN_PATH,\n"
            "HF_HUB_OFFLINE, HF_HUB_CACHE, HF_HOME.\n");
}

int cmd_download(int argc, char **argv) {
    em_hub_options o = em_hub_default_options();
    const char *id = NULL;
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    size_t nfiles = 0;
    if (!files) return 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            free(files);
            return 0;
        } else if (!strcmp(argv[i], "--cache-dir") && i + 1 < argc) {
            o.cache_dir = argv[++i];
        } else if (!strcmp(argv[i], "--offline")) {
            o.offline = 1;
        } else if (!strcmp(argv[i], "--quiet")) {
            o.progress = 0;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "ember download: unknown option '%s'\n\n", argv[i]);
            usage(stderr);
            free(files);
            return 2;
        } else if (!id) {
            id = argv[i];
        } else {
            files[nfiles++] = argv[i];
        }
    }
    if (!id) {
        usage(stderr);
        free(files);
        return 2;
    }
    em_ctx *c = em_ctx_create();
    if (!c) {
        free(files);
        return 1;
    }
    char *dir = NULL;
    em_status st = nfiles ? em_hub_ensure(c, id, files, NULL, &o, &dir)
                          : em_hub_resolve(c, id, &o, &dir);
    int rc = 0;
    if (st != EM_OK) {
        fprintf(stderr, "ember download: %s\n", em_ctx_error(c)->message);
        rc = 1;
    } else {
        printf("%s\n", dir);
    }
    em_free(dir);
    free(files);
    em_ctx_free(c);
    return rc;
}
