/*
 * ember-kernels.lock (khub.h): per package its repo, commit and the sha256 of every file of the
 * variant that loads. JSON:
 *
 *   {"version": 1, "kernels": [{"repo": "org/name", "commit": "<40 hex>|local",
 *                               "files": {"build/<variant>/metadata.json": "<sha256>", ...}}]}
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/hub/hub_internal.h"
#include "kernels_hub/khub.h"

#define OP "kernels lock"

void khub_lock_free(khub_lock *l) {
    if (!l) return;
    free(l->e);
    l->e = NULL;
    l->n = 0;
}

const khub_lock_entry *khub_lock_find(const khub_lock *l, const char *repo) {
    for (int i = 0; l && i < l->n; i++)
        if (!strcmp(l->e[i].repo, repo)) return &l->e[i];
    return NULL;
}

em_status khub_lock_read(em_ctx *c, const char *path, khub_lock *out) {
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        return em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s is not a lock file: %s (line %d)", path,
                           jerr.text, jerr.line);
    em_status st = EM_OK;
    json_t *ver = json_object_get(root, "version"), *ks = json_object_get(root, "kernels");
    if (!json_is_integer(ver) || json_integer_value(ver) != 1 || !json_is_array(ks)) {
        st = em_ctx_fail(c, EM_ERR_FORMAT, OP,
                         "%s: expected {\"version\": 1, \"kernels\": [...]}", path);
        goto out;
    }
    out->e = calloc(json_array_size(ks) + 1, sizeof *out->e);
    if (!out->e) {
        st = em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        goto out;
    }
    size_t i;
    json_t *k;
    json_array_foreach(ks, i, k) {
        khub_lock_entry *e = &out->e[out->n];
        json_t *repo = json_object_get(k, "repo"), *commit = json_object_get(k, "commit"),
               *files = json_object_get(k, "files");
        if (!json_is_string(repo) || !json_is_string(commit) || !json_is_object(files) ||
            json_object_size(files) > 64) {
            st = em_ctx_fail(c, EM_ERR_FORMAT, OP,
                             "%s: kernels[%zu] needs repo, commit and files (at most 64)", path, i);
            goto out;
        }
        snprintf(e->repo, sizeof e->repo, "%s", json_string_value(repo));
        snprintf(e->commit, sizeof e->commit, "%s", json_string_value(commit));
        const char *key;
        json_t *v;
        json_object_foreach(files, key, v) {
            if (!json_is_string(v) || !hub_is_sha256(json_string_value(v))) {
                st = em_ctx_fail(c, EM_ERR_FORMAT, OP, "%s: %s: \"%.100s\" has no sha256 digest",
                                 path, e->repo, key);
                goto out;
            }
            snprintf(e->files[e->n_files], sizeof e->files[0], "%s", key);
            snprintf(e->digests[e->n_files++], 65, "%s", json_string_value(v));
        }
        out->n++;
    }
out:
    json_decref(root);
    if (st != EM_OK) khub_lock_free(out);
    return st;
}

em_status khub_lock_write(em_ctx *c, const char *path, const khub_resolution *r, int n) {
    json_t *root = json_object(), *ks = json_array();
    em_status st = EM_OK;
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "kernels", ks);
    for (int i = 0; i < n && st == EM_OK; i++) {
        const khub_candidate *k = &r[i].c[r[i].chosen];
        json_t *e = json_object(), *files = json_object();
        json_object_set_new(e, "repo", json_string(r[i].repo));
        json_object_set_new(e, "commit", json_string(r[i].commit));
        json_object_set_new(e, "files", files);
        json_array_append_new(ks, e);
        char rel[400], full[1500], hex[65];
        for (int f = -1; f < k->meta.n_files; f++) {
            snprintf(rel, sizeof rel, "build/%s/%s", k->v.name,
                     f < 0 ? "metadata.json" : k->meta.files[f]);
            snprintf(full, sizeof full, "%s/%s", r[i].root, rel);
            if (!khub_file_sha256(full, hex)) {
                st = em_ctx_fail(c, EM_ERR_IO, OP, "cannot read %s", full);
                break;
            }
            json_object_set_new(files, rel, json_string(hex));
        }
    }
    if (st == EM_OK && json_dump_file(root, path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0)
        st = em_ctx_fail(c, EM_ERR_IO, OP, "cannot write %s", path);
    json_decref(root);
    return st;
}
