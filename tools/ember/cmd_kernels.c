/* `ember kernels list|explain|lock|download`: the kernel hub from the command line
 * (ember/kernels.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "ember/ember.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ember kernels list [--all] [--kind KIND] [--kernels SPECS]\n"
            "       ember kernels explain [--target KIND] SPEC\n"
            "       ember kernels lock [-o FILE] SPEC...\n"
            "       ember kernels download SPEC\n\n"
            "Kernel packages replace built-in kernels at run time (docs/kernels.md). SPEC is a\n"
            "package folder or a Hub id (org/name, org/name@v1, org/name@<commit>).\n\n"
            "  list      per op, every implementation, best first; * marks the first choice\n"
            "            (--all: the ops with only the built-in too; --kernels: load SPECS first;\n"
            "            --kind: the device kind, cpu (default), pjrt:tpu, pjrt:cpu for XLA's CPU\n"
            "            plugin, ...)\n"
            "  explain   every variant of SPEC, Accepted or Rejected with the reason (--target:\n"
            "            for kind cpu, pjrt or pjrt:<platform> only; default any)\n"
            "  lock      write the lock file (default ember-kernels.lock): repo, commit and the\n"
            "            sha256 of every file of each package's chosen variant\n"
            "  download  fetch SPEC's variants for this machine into the Hub cache\n\n"
            "Loading never uses the network: a Hub id loads from the cache (at the lock's\n"
            "commit).\n"
            "Environment: EMBER_KERNELS=SPEC[,SPEC...] loads packages in every run (none: off),\n"
            "EMBER_KERNELS_LOCK=FILE.\n");
}

static int fail(em_ctx *c) {
    fprintf(stderr, "ember kernels: %s\n", em_ctx_error(c)->message);
    em_ctx_free(c);
    return 1;
}

static int load_specs(em_ctx *c, const char *specs) {
    char *list = strdup(specs);
    int rc = 0;
    for (char *save = NULL, *s = list ? strtok_r(list, ",", &save) : NULL; s && !rc;
         s = strtok_r(NULL, ",", &save))
        if (strcmp(s, "none") && em_kernels_load(c, s, NULL) != EM_OK) rc = 1;
    free(list);
    return rc;
}

int cmd_kernels(int argc, char **argv) {
    if (argc < 2 || cli_wants_help(argc, argv)) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1];
    em_ctx *c = em_ctx_create();
    if (!c) return 1;
    if (!strcmp(sub, "list")) {
        bool all = false;
        const char *kind = "cpu";
        for (int i = 2; i < argc; i++) {
            if (!strcmp(argv[i], "--all")) {
                all = true;
            } else if (!strcmp(argv[i], "--kind") && i + 1 < argc) {
                kind = argv[++i];
            } else if (!strcmp(argv[i], "--kernels") && i + 1 < argc) {
                if (load_specs(c, argv[++i])) return fail(c);
            } else {
                fprintf(stderr, "ember kernels list: unknown argument '%s'\n", argv[i]);
                em_ctx_free(c);
                return 2;
            }
        }
        char *s = em_kernels_list(kind, all);
        if (s) fputs(s, stdout);
        free(s);
        em_ctx_free(c);
        return s ? 0 : 1;
    }
    bool targeted = argc == 5 && !strcmp(argv[2], "--target");
    if (!strcmp(sub, "explain") && (argc == 3 || targeted)) {
        char *text = NULL;
        em_kernels_options o = em_kernels_default_options();
        o.target = targeted ? argv[3] : NULL;
        em_status st = em_kernels_explain(c, argv[argc - 1], &o, &text);
        if (text) fputs(text, stdout);
        free(text);
        if (st != EM_OK && st != EM_ERR_UNSUPPORTED) return fail(c);
        em_ctx_free(c);
        return st == EM_OK ? 0 : 1;
    }
    if (!strcmp(sub, "lock") && argc >= 3) {
        const char *out = "ember-kernels.lock";
        const char **specs = calloc((size_t)argc, sizeof *specs);
        int n = 0;
        for (int i = 2; specs && i < argc; i++) {
            if (!strcmp(argv[i], "-o") && i + 1 < argc)
                out = argv[++i];
            else
                specs[n++] = argv[i];
        }
        em_status st = specs ? em_kernels_lock(c, specs, n, out) : EM_ERR_OOM;
        free(specs);
        if (st != EM_OK) return fail(c);
        printf("wrote %s (%d package%s)\n", out, n, n == 1 ? "" : "s");
        em_ctx_free(c);
        return 0;
    }
    if (!strcmp(sub, "download") && argc == 3) {
        char *dir = NULL;
        if (em_kernels_download(c, argv[2], &dir) != EM_OK) return fail(c);
        printf("%s\n", dir);
        free(dir);
        em_ctx_free(c);
        return 0;
    }
    em_ctx_free(c);
    usage(stderr);
    return 2;
}
