/* Hub ids to local files (include/ember/hub.h): one file through the cache (huggingface_hub's
 * _hf_hub_download_to_cache_dir, step by step), a list of files at one commit, and the files of
 * a model. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/make_dirs.h"
#include "core/tensor_impl.h"
#include "io/hub/hub_internal.h"

/* Shown in errors: "org/name@rev". */
#define REPO_FMT "%s@%s"

/* The commit's copy of a file is there (or, with `no_exist`, known to be absent). */
typedef enum { FOUND, ABSENT } fetch_result;

/* What a failed HEAD leaves to try: the copy the cache holds for this revision, if any
 * (huggingface_hub falls back to it on network and server errors). */
static char *cached_pointer(const hub_repo *r, const char *rev, const char *filename,
                            char commit[129]) {
    if (!hub_cached_commit(r, rev, commit)) return NULL;
    char *p = hub_pointer_path(r, commit, filename);
    if (p && hub_exists(p)) return p;
    free(p);
    return NULL;
}

/* The error for an HTTP status of the metadata request, naming the URL and what to do. */
static em_status head_error(em_ctx *c, const char *op, const hub_repo *r, const char *rev,
                            const char *filename, const char *url, const hub_meta *m) {
    const char *code = m->error_code;
    const char *msg = m->error_message;
    char token_note[160];
    if (r->token)
        snprintf(token_note, sizeof token_note, "the token from %s was sent", r->token_source);
    else
        snprintf(token_note, sizeof token_note, "no token was sent: set HF_TOKEN or log in with "
                                                "`hf auth login`");
    if (!strcmp(code, "GatedRepo"))
        return EM_FAIL(c, EM_ERR_IO, op, "%s is a gated repo (HTTP %ld for %s: %.200s): accept "
                       "its conditions on its Hub page, then set HF_TOKEN to a token of that "
                       "account (%s)", r->repo_id, m->status, url, msg, token_note);
    if (m->status == 404 && !strcmp(code, "RevisionNotFound"))
        return EM_FAIL(c, EM_ERR_NOT_FOUND, op, "revision '%s' not found in %s (HTTP 404 for %s)",
                       rev, r->repo_id, url);
    if (m->status == 404 && !strcmp(code, "EntryNotFound"))
        return EM_FAIL(c, EM_ERR_NOT_FOUND, op, "%s does not exist in " REPO_FMT
                       " (HTTP 404 for %s)", filename, r->repo_id, rev, url);
    if (!strcmp(code, "RepoNotFound") || m->status == 401 || m->status == 404)
        return EM_FAIL(c, m->status == 404 || !strcmp(code, "RepoNotFound") ? EM_ERR_NOT_FOUND
                                                                            : EM_ERR_IO,
                       op, "repository %s not found, or private or gated (HTTP %ld for %s%s%.200s)"
                       ": check the id; for a private or gated repo set HF_TOKEN to a token with "
                       "access (%s)", r->repo_id, m->status, url, *msg ? ": " : "", msg,
                       token_note);
    if (m->status == 403)
        return EM_FAIL(c, EM_ERR_IO, op, "access to %s denied (HTTP 403 for %s%s%.200s): check "
                       "that the token can read it (%s)", r->repo_id, url, *msg ? ": " : "", msg,
                       token_note);
    return EM_FAIL(c, EM_ERR_IO, op, "HTTP %ld for %s%s%.200s, and %s is not in the cache %s",
                   m->status, url, *msg ? ": " : "", msg, filename, r->storage);
}

/* Downloads blobs/<etag> under the blob's lock (unless another process already has) and links
 * the snapshot pointer to it. */
static em_status store(em_ctx *c, const char *op, const hub_repo *r, const char *filename,
                       const hub_meta *m, const char *pointer) {
    char *blobs = hub_join(r->storage, "blobs");
    char *blob = blobs ? hub_join(blobs, m->etag) : NULL;
    char *part = blob ? hub_strf("%s.incomplete", blob) : NULL;
    em_status st = EM_OK;
    int lock = -1;
    if (!part) {
        st = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
        goto out;
    }
    if ((st = em_make_dirs(c, op, blobs)) != EM_OK) goto out;
    if ((lock = hub_lock_blob(c, op, r, m->etag)) < 0) {
        st = em_ctx_status(c);
        goto out;
    }
    if (!hub_exists(blob)) {
        /* an LFS etag is the sha256 of the content; a git etag is a sha1 of a git object, which
         * huggingface_hub does not check either */
        const char *sha = hub_is_sha256(m->etag) ? m->etag : NULL;
        if ((st = hub_http_download(c, op, r, m->download_url, !m->off_hub, part, m->size, sha,
                                    filename)) != EM_OK)
            goto out;
        if (rename(part, blob) != 0) {
            st = EM_FAIL(c, EM_ERR_IO, op, "cannot rename %s to %s: %s", part, blob,
                         strerror(errno));
            goto out;
        }
    }
    st = hub_link_pointer(c, op, r, m->etag, pointer, filename);
out:
    if (lock >= 0) close(lock);
    free(blobs);
    free(blob);
    free(part);
    return st;
}

/* One file of the repo at `rev`, through the cache. On FOUND *out_path is the snapshot pointer;
 * on ABSENT (only when `optional`) it is NULL. `commit` receives the commit `rev` stands for
 * whenever it is learnt. */
static em_status fetch(em_ctx *c, const char *op, const hub_repo *r, const char *rev,
                       const char *filename, bool optional, char **out_path, fetch_result *res,
                       char commit[129]) {
    *out_path = NULL;
    *res = ABSENT;
    commit[0] = '\0';
    char why[160];
    if (!filename || !hub_valid_rel_path(filename, why, sizeof why))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, op, "file name '%.300s' of %s would not stay inside "
                       "the cache: it %s", filename ? filename : "(null)", r->repo_id,
                       filename ? why : "is NULL");

    /* A commit never changes: what the cache holds for it is the answer, without asking. */
    if (hub_is_commit(rev)) {
        snprintf(commit, 129, "%s", rev);
        char *p = hub_pointer_path(r, rev, filename);
        if (!p) return EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
        if (hub_exists(p)) {
            *out_path = p;
            *res = FOUND;
            return EM_OK;
        }
        free(p);
        if (hub_no_exist_marked(r, rev, filename)) {
            if (optional) return EM_OK;
            return EM_FAIL(c, EM_ERR_NOT_FOUND, op, "%s does not exist in %s at commit %s (as "
                           "recorded in %s/.no_exist)", filename, r->repo_id, rev, r->storage);
        }
    }

    if (r->offline) {
        char *p = cached_pointer(r, rev, filename, commit);
        if (p) {
            *out_path = p;
            *res = FOUND;
            return EM_OK;
        }
        if (!commit[0])
            return EM_FAIL(c, EM_ERR_NOT_FOUND, op, "offline mode (%s): %s of " REPO_FMT " is not "
                           "in the cache: %s/refs/%s does not exist (unset HF_HUB_OFFLINE to "
                           "download)", r->offline_why, filename, r->repo_id, rev, r->storage,
                           rev);
        if (hub_no_exist_marked(r, commit, filename)) {
            if (optional) return EM_OK;
            return EM_FAIL(c, EM_ERR_NOT_FOUND, op, "%s does not exist in " REPO_FMT " (commit "
                           "%s, as recorded in %s/.no_exist)", filename, r->repo_id, rev, commit,
                           r->storage);
        }
        /* never looked up: an optional file counts as absent, as transformers treats it */
        if (optional) return EM_OK;
        return EM_FAIL(c, EM_ERR_NOT_FOUND, op, "offline mode (%s): %s of " REPO_FMT " is not in "
                       "the cache (looked for %s/snapshots/%s/%s; unset HF_HUB_OFFLINE to "
                       "download)", r->offline_why, filename, r->repo_id, rev, r->storage, commit,
                       filename);
    }

    /* hf_hub_url: {endpoint}/{repo_id}/resolve/{quote(revision, safe="")}/{quote(filename)} */
    size_t cap = strlen(r->endpoint) + strlen(r->repo_id) + 3 * (strlen(rev) + strlen(filename)) +
                 32;
    char *url = malloc(cap);
    if (!url) return EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
    snprintf(url, cap, "%s/%s/resolve/", r->endpoint, r->repo_id);
    hub_quote(url, cap, rev, false);
    strcat(url, "/");
    hub_quote(url, cap, filename, true);

    hub_meta m;
    char *pointer = NULL;
    em_status st = hub_http_head(c, op, r, url, &m);
    if (st != EM_OK) goto out;
    bool ok_status = m.curl_code == 0 && (m.status / 100 == 2 || (m.off_hub && m.status / 100 == 3));
    bool have_commit = m.commit[0] && !m.oversized_header && hub_valid_segment(m.commit);

    if (m.curl_code == 0 && m.status == 404 && !strcmp(m.error_code, "EntryNotFound")) {
        /* remember the absence for this commit, as huggingface_hub does */
        if (have_commit) {
            snprintf(commit, 129, "%s", m.commit);
            hub_no_exist_mark(r, m.commit, filename);
            hub_write_ref(NULL, op, r, rev, m.commit);
        }
        if (optional) goto out;
        st = head_error(c, op, r, rev, filename, url, &m);
        goto out;
    }
    if (!ok_status) {
        bool definite = m.curl_code == 0 && m.status == 404; /* the Hub says it is not there */
        if (!definite && (pointer = cached_pointer(r, rev, filename, commit))) {
            *res = FOUND;
            goto out;
        }
        /* the Hub cannot be asked now: an optional file is skipped, as in offline mode; an
         * answer about access (401/403) still fails, it will not go away by itself */
        bool unreachable = m.curl_code || m.status >= 500 || m.status == 429 || m.status == 408;
        if (optional && unreachable) goto out;
        if (m.curl_code)
            st = EM_FAIL(c, EM_ERR_IO, op, "network failure: cannot reach %s: %s (curl error %d),"
                         " and %s is not in the cache %s; check the connection and HF_ENDPOINT, or"
                         " set HF_HUB_OFFLINE=1 to use cached files only", url, m.curl_error,
                         m.curl_code, filename, r->storage);
        else
            st = head_error(c, op, r, rev, filename, url, &m);
        goto out;
    }
    if (!have_commit || !m.etag[0] || m.oversized_header || !hub_valid_segment(m.etag)) {
        if ((pointer = cached_pointer(r, rev, filename, commit))) {
            *res = FOUND;
            goto out;
        }
        if (!m.commit[0])
            st = EM_FAIL(c, EM_ERR_FORMAT, op, "the answer from %s has no X-Repo-Commit header: "
                         "is HF_ENDPOINT (%s) a Hugging Face Hub? (a proxy or firewall can also "
                         "cause this)", url, r->endpoint);
        else if (!m.etag[0])
            st = EM_FAIL(c, EM_ERR_FORMAT, op, "the answer from %s has no ETag header, so the "
                         "file cannot be stored under its hash", url);
        else
            st = EM_FAIL(c, EM_ERR_FORMAT, op, "the answer from %s names commit '%.140s' and etag "
                         "'%.140s': refused, as they are not plain names and would place files "
                         "outside %s", url, m.commit, m.etag, r->storage);
        goto out;
    }
    snprintf(commit, 129, "%s", m.commit);
    pointer = hub_pointer_path(r, m.commit, filename);
    if (!pointer) {
        st = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
        goto out;
    }
    if (hub_exists(pointer)) {
        /* cached already: keep the ref current, best effort (the cache may be read-only) */
        hub_write_ref(NULL, op, r, rev, m.commit);
        *res = FOUND;
        goto out;
    }
    hub_cachedir_tag(r);
    if ((st = hub_write_ref(c, op, r, rev, m.commit)) != EM_OK) goto out;
    if ((st = store(c, op, r, filename, &m, pointer)) != EM_OK) goto out;
    *res = FOUND;
out:
    if (st == EM_OK && *res == FOUND) {
        *out_path = pointer;
        pointer = NULL;
    }
    free(pointer);
    hub_meta_free(&m);
    free(url);
    return st;
}

em_status em_hub_file(em_ctx *c, const char *id, const char *filename,
                      const em_hub_options *opts, char **out_path) {
    const char *op = "hub_file";
    if (!out_path) return EM_FAIL(c, EM_ERR_INVALID_ARG, op, "out_path is NULL");
    *out_path = NULL;
    if (em_ctx_status(c) != EM_OK) return em_ctx_status(c);
    hub_repo r;
    em_status st = hub_repo_init(c, op, id, opts, &r);
    if (st != EM_OK) return st;
    if (r.local_dir) {
        char why[160];
        if (!filename || !hub_valid_rel_path(filename, why, sizeof why)) {
            st = EM_FAIL(c, EM_ERR_INVALID_ARG, op, "file name '%.300s' would leave the directory "
                         "%s: it %s", filename ? filename : "(null)", r.local_dir,
                         filename ? why : "is NULL");
        } else {
            char *p = hub_join(r.local_dir, filename);
            if (!p) st = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
            else if (!hub_exists(p)) {
                st = EM_FAIL(c, EM_ERR_NOT_FOUND, op, "no file %s in the directory %s", filename,
                             r.local_dir);
                free(p);
            } else {
                *out_path = p;
            }
        }
    } else {
        fetch_result res;
        char commit[129];
        st = fetch(c, op, &r, r.revision, filename, false, out_path, &res, commit);
    }
    hub_repo_free(&r);
    return st;
}

/* Fetches `files` (NULL-terminated) at `rev`, switching `rev` to the commit once it is known, so
 * that every file comes from one snapshot. */
static em_status fetch_list(em_ctx *c, const char *op, const hub_repo *r, char rev[256],
                            const char *const *files, bool optional, char commit[129],
                            bool *absent_any) {
    for (size_t i = 0; files && files[i]; i++) {
        char *p = NULL;
        fetch_result res;
        char got[129];
        em_status st = fetch(c, op, r, rev, files[i], optional, &p, &res, got);
        free(p);
        if (st != EM_OK) return st;
        if (res == ABSENT && absent_any) *absent_any = true;
        if (got[0] && !commit[0]) {
            snprintf(commit, 129, "%s", got);
            snprintf(rev, 256, "%s", got);
        }
    }
    return EM_OK;
}

static em_status snapshot_dir(em_ctx *c, const char *op, const hub_repo *r, const char *commit,
                              char **out_dir) {
    if (!commit[0])
        return EM_FAIL(c, EM_ERR_NOT_FOUND, op, "could not learn which commit " REPO_FMT " is",
                       r->repo_id, r->revision);
    *out_dir = hub_strf("%s/snapshots/%s", r->storage, commit);
    if (!*out_dir) return EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
    /* every file may have been optional and absent: the directory still has to exist */
    if (!hub_exists(*out_dir) && em_make_dirs(c, op, *out_dir) != EM_OK) {
        free(*out_dir);
        *out_dir = NULL;
        return em_ctx_status(c);
    }
    return EM_OK;
}

static em_status local_check(em_ctx *c, const char *op, const char *dir,
                             const char *const *files) {
    for (size_t i = 0; files && files[i]; i++) {
        char why[160];
        if (!hub_valid_rel_path(files[i], why, sizeof why))
            return EM_FAIL(c, EM_ERR_INVALID_ARG, op, "file name '%.300s' would leave the "
                           "directory %s: it %s", files[i], dir, why);
        char *p = hub_join(dir, files[i]);
        if (!p) return EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
        bool ok = hub_exists(p);
        free(p);
        if (!ok) return EM_FAIL(c, EM_ERR_NOT_FOUND, op, "no file %s in the directory %s",
                                files[i], dir);
    }
    return EM_OK;
}

em_status em_hub_ensure(em_ctx *c, const char *id, const char *const *required,
                        const char *const *optional, const em_hub_options *opts,
                        char **out_dir) {
    const char *op = "hub_ensure";
    if (!out_dir) return EM_FAIL(c, EM_ERR_INVALID_ARG, op, "out_dir is NULL");
    *out_dir = NULL;
    if (em_ctx_status(c) != EM_OK) return em_ctx_status(c);
    if (!(required && required[0]) && !(optional && optional[0]))
        return EM_FAIL(c, EM_ERR_INVALID_ARG, op, "no file names given for %s", id ? id : "(null)");
    hub_repo r;
    em_status st = hub_repo_init(c, op, id, opts, &r);
    if (st != EM_OK) return st;
    if (r.local_dir) {
        st = local_check(c, op, r.local_dir, required);
        if (st == EM_OK && !(*out_dir = strdup(r.local_dir)))
            st = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
    } else {
        char rev[256], commit[129] = "";
        snprintf(rev, sizeof rev, "%s", r.revision);
        st = fetch_list(c, op, &r, rev, required, false, commit, NULL);
        if (st == EM_OK) st = fetch_list(c, op, &r, rev, optional, true, commit, NULL);
        if (st == EM_OK) st = snapshot_dir(c, op, &r, commit, out_dir);
    }
    hub_repo_free(&r);
    return st;
}

/* ---- the files of a model ----------------------------------------------------------------- */

static const char *const model_optional[] = {
    "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "chat_template.jinja", NULL,
};

/* The shard names of a safetensors index (its weight_map's values, each once), as a
 * NULL-terminated array the caller frees with free_list. */
static em_status index_shards(em_ctx *c, const char *op, const char *path, char ***out) {
    *out = NULL;
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        return EM_FAIL(c, EM_ERR_FORMAT, op, "%s is not valid JSON: %s (line %d)", path,
                       jerr.text, jerr.line);
    json_t *map = json_object_get(root, "weight_map");
    em_status st = EM_OK;
    if (!json_is_object(map) || json_object_size(map) == 0) {
        st = EM_FAIL(c, EM_ERR_FORMAT, op, "%s has no \"weight_map\" object naming the shards",
                     path);
        goto out;
    }
    size_t n = 0;
    char **names = calloc(json_object_size(map) + 1, sizeof *names);
    if (!names) {
        st = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(map, key, val) {
        if (!json_is_string(val)) {
            st = EM_FAIL(c, EM_ERR_FORMAT, op, "%s: weight_map[\"%.100s\"] is not a file name",
                         path, key);
            break;
        }
        const char *s = json_string_value(val);
        bool seen = false;
        for (size_t i = 0; i < n && !seen; i++) seen = !strcmp(names[i], s);
        if (seen) continue;
        if (!(names[n] = strdup(s))) {
            st = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
            break;
        }
        n++;
    }
    if (st != EM_OK) {
        for (size_t i = 0; i < n; i++) free(names[i]);
        free(names);
    } else {
        *out = names;
    }
out:
    json_decref(root);
    return st;
}

static void free_list(char **l) {
    for (size_t i = 0; l && l[i]; i++) free(l[i]);
    free(l);
}

static em_status resolve_local(em_ctx *c, const char *op, const char *dir) {
    static const char *const config[] = {"config.json", NULL};
    em_status st = local_check(c, op, dir, config);
    if (st != EM_OK) return st;
    char *single = hub_join(dir, "model.safetensors");
    char *index = hub_join(dir, "model.safetensors.index.json");
    if (!single || !index) {
        st = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
    } else if (!hub_exists(single)) {
        if (!hub_exists(index)) {
            st = EM_FAIL(c, EM_ERR_NOT_FOUND, op, "the directory %s has neither model.safetensors "
                         "nor model.safetensors.index.json", dir);
        } else {
            char **shards;
            if ((st = index_shards(c, op, index, &shards)) == EM_OK) {
                st = local_check(c, op, dir, (const char *const *)shards);
                free_list(shards);
            }
        }
    }
    free(single);
    free(index);
    return st;
}

em_status em_hub_resolve(em_ctx *c, const char *id, const em_hub_options *opts, char **out_dir) {
    const char *op = "hub_resolve";
    if (!out_dir) return EM_FAIL(c, EM_ERR_INVALID_ARG, op, "out_dir is NULL");
    *out_dir = NULL;
    if (em_ctx_status(c) != EM_OK) return em_ctx_status(c);
    hub_repo r;
    em_status st = hub_repo_init(c, op, id, opts, &r);
    if (st != EM_OK) return st;
    if (r.local_dir) {
        st = resolve_local(c, op, r.local_dir);
        if (st == EM_OK && !(*out_dir = strdup(r.local_dir)))
            st = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
        hub_repo_free(&r);
        return st;
    }
    static const char *const config[] = {"config.json", NULL};
    static const char *const single[] = {"model.safetensors", NULL};
    static const char *const index[] = {"model.safetensors.index.json", NULL};
    char rev[256], commit[129] = "";
    snprintf(rev, sizeof rev, "%s", r.revision);
    st = fetch_list(c, op, &r, rev, config, false, commit, NULL);
    if (st == EM_OK) st = fetch_list(c, op, &r, rev, model_optional, true, commit, NULL);
    /* transformers' order: the single file, else the index and its shards */
    bool no_single = false, no_index = false;
    if (st == EM_OK) st = fetch_list(c, op, &r, rev, single, true, commit, &no_single);
    if (st == EM_OK && no_single) {
        st = fetch_list(c, op, &r, rev, index, true, commit, &no_index);
        if (st == EM_OK && no_index)
            st = EM_FAIL(c, EM_ERR_NOT_FOUND, op, REPO_FMT " (commit %s) has neither "
                         "model.safetensors nor model.safetensors.index.json", r.repo_id,
                         r.revision, commit);
        if (st == EM_OK) {
            char *path = hub_pointer_path(&r, commit, "model.safetensors.index.json");
            char **shards = NULL;
            st = path ? index_shards(c, op, path, &shards) : EM_FAIL(c, EM_ERR_OOM, op,
                                                                      "out of memory");
            if (st == EM_OK)
                st = fetch_list(c, op, &r, rev, (const char *const *)shards, false, commit, NULL);
            free_list(shards);
            free(path);
        }
    }
    if (st == EM_OK) st = snapshot_dir(c, op, &r, commit, out_dir);
    hub_repo_free(&r);
    return st;
}
