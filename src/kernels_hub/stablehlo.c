/*
 * ember-stablehlo variants (khub.h): StableHLO snippets for PJRT devices. metadata.json declares
 * per op a "stablehlo" list of snippets,
 *
 *   {"file": "ragged_dot_native.mlir", "platforms": ["tpu"], "priority": 20,
 *    "ranks": [2, 3, 1], "attrs": {"rhs_nk": 0}}
 *
 * each a file of the variant (digested like every other file; the template convention is
 * src/backends/pjrt/snippet.h's). Each becomes an implementation in the kernel registry for kind
 * "pjrt:<platform>" per platform named, or "pjrt" (every plugin) when none is; it takes the calls
 * of the op's dtypes and modes whose input ranks and attributes match.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/hub/hub_internal.h"
#include "kernels_hub/khub.h"

#define OP "kernels"

static bool when_read(json_t *o, const em_op_def *def, pj_snippet_when *w, char *why, size_t n) {
    json_t *ranks = json_object_get(o, "ranks"), *attrs = json_object_get(o, "attrs"), *x;
    size_t i;
    if (ranks && (!json_is_array(ranks) || json_array_size(ranks) > EM_MAX_INPUTS)) {
        snprintf(why, n, "metadata.json: a %s snippet's ranks is not a list of at most %d ranks",
                 def->name, EM_MAX_INPUTS);
        return false;
    }
    json_array_foreach(ranks, i, x) {
        w->ranks[w->n_ranks++] = json_is_integer(x) ? (int)json_integer_value(x) : -1;
    }
    const char *key;
    json_object_foreach(attrs, key, x) {
        int a = -1;
        for (int k = 0; k < def->n_attrs; k++)
            if (!strcmp(def->attr_names[k], key)) a = k;
        if (a < 0 || w->n_attrs == PJ_SNIPPET_MAX_ATTRS || def->attr_types[a] == EM_ATTR_FLOAT ||
            def->attr_types[a] == EM_ATTR_INTS || (!json_is_integer(x) && !json_is_boolean(x))) {
            snprintf(why, n, "metadata.json: a %s snippet's attrs names '%.40s', not an integer "
                             "or bool attribute of the op", def->name, key);
            return false;
        }
        w->attr[w->n_attrs] = a;
        w->value[w->n_attrs++] = json_is_boolean(x) ? json_is_true(x) : json_integer_value(x);
    }
    return true;
}

bool khub_shlo_meta(json_t *list, khub_meta *m, int op, char *why, size_t why_n) {
    const em_op_def *def = em_op_get(m->ops[op].op);
    size_t i;
    json_t *o;
    if (!json_is_array(list)) {
        snprintf(why, why_n, "metadata.json: op %s: stablehlo is not a list", def->name);
        return false;
    }
    json_array_foreach(list, i, o) {
        json_t *file = json_object_get(o, "file"), *pl = json_object_get(o, "platforms"),
               *prio = json_object_get(o, "priority"), *x;
        if (m->n_snippets == KHUB_MAX_SNIPPETS || !json_is_string(file) ||
            strlen(json_string_value(file)) >= sizeof m->snippets[0].file ||
            (pl && (!json_is_array(pl) || json_array_size(pl) > 4)) ||
            (prio && !json_is_integer(prio))) {
            snprintf(why, why_n, "metadata.json: op %s: a stablehlo entry needs a file name and "
                                 "may have platforms (at most 4) and an integer priority (at most "
                                 "%d entries)", def->name, KHUB_MAX_SNIPPETS);
            return false;
        }
        khub_snippet *s = &m->snippets[m->n_snippets++];
        memset(s, 0, sizeof *s);
        s->op = op;
        snprintf(s->file, sizeof s->file, "%s", json_string_value(file));
        s->priority = prio ? (int)json_integer_value(prio) : 10;
        size_t j;
        json_array_foreach(pl, j, x) {
            if (!json_is_string(x) || strlen(json_string_value(x)) >= sizeof s->platforms[0]) {
                snprintf(why, why_n, "metadata.json: %s: a platform is not a short name", s->file);
                return false;
            }
            snprintf(s->platforms[s->n_platforms++], sizeof s->platforms[0], "%s",
                     json_string_value(x));
        }
        if (!when_read(o, def, &s->when, why, why_n)) return false;
    }
    return true;
}

bool khub_shlo_check(const khub_meta *m, char *why, size_t why_n) {
    for (int o = 0; o < m->n_ops; o++) {
        bool any = false;
        for (int s = 0; s < m->n_snippets; s++) any |= m->snippets[s].op == o;
        if (!any) {
            snprintf(why, why_n, "metadata.json: op %s has no stablehlo snippet",
                     em_op_get(m->ops[o].op)->name);
            return false;
        }
    }
    for (int s = 0; s < m->n_snippets; s++) {
        bool listed = false;
        for (int f = 0; f < m->n_files; f++) listed |= !strcmp(m->files[f], m->snippets[s].file);
        if (!listed) {
            snprintf(why, why_n, "snippet %s has no digest in metadata.json",
                     m->snippets[s].file);
            return false;
        }
    }
    return true;
}

/* The file's bytes, checked against the digest metadata.json gives (what is compiled is what
 * was verified, whatever happens to the file afterwards). */
static char *read_verified(em_ctx *c, const char *path, const char *rel, const char *want) {
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long n = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
        text = malloc((size_t)n + 1);
    bool ok = text && fread(text, 1, (size_t)n, f) == (size_t)n;
    if (f) fclose(f);
    if (!ok) {
        free(text);
        em_ctx_fail(c, EM_ERR_IO, OP, "%s is missing or unreadable", rel);
        return NULL;
    }
    text[n] = 0;
    hub_sha256 h;
    char hex[65];
    hub_sha256_init(&h);
    hub_sha256_update(&h, text, (size_t)n);
    hub_sha256_final_hex(&h, hex);
    if (strcmp(hex, want) || strlen(text) != (size_t)n) {
        em_ctx_fail(c, EM_ERR_FORMAT, OP, "digest mismatch in %s: metadata.json says %s, the file "
                    "has %s%s", rel, want, hex, strcmp(hex, want) ? "" : " (with a NUL byte)");
        free(text);
        return NULL;
    }
    return text;
}

static const char *digest_of(const khub_meta *m, const char *file) {
    for (int f = 0; f < m->n_files; f++)
        if (!strcmp(m->files[f], file)) return m->digests[f];
    return "";
}

/* The snippet of s, read and verified; NULL with an error in c. */
static pj_snippet *snippet_make(em_ctx *c, const khub_resolution *r, const khub_snippet *s) {
    const khub_candidate *k = &r->c[r->chosen];
    pj_snippet *p = calloc(1, sizeof *p);
    if (!p) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    char path[1400];
    snprintf(path, sizeof path, "%s/build/%s/%s", r->root, k->v.name, s->file);
    snprintf(p->file, sizeof p->file, "build/%s/%s", k->v.name, s->file);
    snprintf(p->digest, sizeof p->digest, "%s", digest_of(&k->meta, s->file));
    p->when = s->when;
    /* the symbol: the file's stem in [A-Za-z0-9_] */
    const char *base = strrchr(s->file, '/') ? strrchr(s->file, '/') + 1 : s->file;
    size_t i = 0;
    for (; base[i] && base[i] != '.' && i + 1 < sizeof p->sym; i++)
        p->sym[i] = isalnum((unsigned char)base[i]) ? base[i] : '_';
    p->sym[i] = 0;
    p->text = read_verified(c, path, p->file, p->digest);
    if (!p->text) {
        free(p);
        return NULL;
    }
    return p;
}

static void impl_fill(em_kimpl *e, const khub_candidate *k, const khub_snippet *s,
                      const pj_snippet *p, const char *platform) {
    const khub_op_decl *d = &k->meta.ops[s->op];
    snprintf(e->name, sizeof e->name, "%s", p->sym);
    snprintf(e->source, sizeof e->source, "%s v%d (%s)", k->meta.name, k->meta.version,
             k->v.name);
    snprintf(e->kind, sizeof e->kind, "pjrt%s%s", platform ? ":" : "", platform ? platform : "");
    e->op = d->op;
    e->priority = s->priority;
    e->dtypes = d->dtypes;
    e->modes = d->modes;
    e->run = pj_snippet_run;
    e->supports = pj_snippet_supports;
    e->user = (void *)p;
    atomic_init(&e->disabled, false);
}

em_status khub_shlo_impls(em_ctx *c, const khub_resolution *r, em_kimpl **out, int *n_out) {
    const khub_candidate *k = &r->c[r->chosen];
    const khub_meta *m = &k->meta;
    int n = 0;
    for (int s = 0; s < m->n_snippets; s++)
        n += m->snippets[s].n_platforms ? m->snippets[s].n_platforms : 1;
    em_kimpl *ks = calloc((size_t)n + 1, sizeof *ks);
    pj_snippet *made[KHUB_MAX_SNIPPETS] = {NULL};
    if (!ks) return em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
    n = 0;
    for (int s = 0; s < m->n_snippets; s++) {
        const khub_snippet *sn = &m->snippets[s];
        if (!(made[s] = snippet_make(c, r, sn))) {
            for (int j = 0; j < s; j++) {
                free(made[j]->text);
                free(made[j]);
            }
            free(ks);
            return c->err.status;
        }
        for (int p = 0; p < (sn->n_platforms ? sn->n_platforms : 1); p++)
            impl_fill(&ks[n++], k, sn, made[s], sn->n_platforms ? sn->platforms[p] : NULL);
    }
    *out = ks;
    *n_out = n;
    return EM_OK;
}

bool khub_shlo_explain(const khub_meta *m, char **s) {
    bool ok = true;
    for (int i = 0; i < m->n_snippets && ok; i++) {
        const khub_snippet *sn = &m->snippets[i];
        char kinds[128] = "pjrt (every plugin)";
        for (int p = 0; p < sn->n_platforms; p++) {
            size_t u = p ? strlen(kinds) : 0;
            snprintf(kinds + u, sizeof kinds - u, "%spjrt:%s", p ? ", " : "", sn->platforms[p]);
        }
        ok = khub_appendf(s, "    %s: %s for %s, priority %d\n",
                          em_op_get(m->ops[sn->op].op)->name, sn->file, kinds, sn->priority);
    }
    return ok;
}
