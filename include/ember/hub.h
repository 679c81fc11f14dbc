/*
 * ember/hub.h — Hugging Face Hub ids to local files, through the Hub's own cache.
 *
 * A model is named as on the Hub, "Qwen/Qwen3-0.6B", optionally at a revision,
 * "Qwen/Qwen3-0.6B@v1.0" (a branch, a tag or a 40-hex commit; default "main"), or by the path of
 * a local directory holding its files (a directory of that name wins over a Hub id). Files are
 * kept in the cache huggingface_hub uses, laid out exactly as it lays it out, so a model already
 * downloaded by the Python tools is used in place, and what Ember downloads the Python tools find:
 *
 *   <cache>/models--Qwen--Qwen3-0.6B/
 *     refs/main                        the commit "main" pointed to when last asked
 *     snapshots/<commit>/config.json   -> ../../blobs/<etag>   (relative symlinks)
 *     blobs/<etag>                     the content; an LFS file's etag is its sha256
 *     .no_exist/<commit>/<file>        empty: the commit has no such file
 *
 * <cache> is the option cache_dir, else $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else
 * $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
 *
 * A missing file is downloaded from {$HF_ENDPOINT or https://huggingface.co}/{id}/resolve/{rev}/
 * {file}: a HEAD gives the commit (X-Repo-Commit), the blob name (X-Linked-Etag or ETag) and size
 * (X-Linked-Size or Content-Length); the content is fetched into blobs/<etag>.incomplete (a later
 * call resumes it with a Range request), checked (size; sha256 for LFS files) and renamed. With
 * HF_HUB_OFFLINE=1 the network is never used and the cache alone answers; online, a network or
 * server failure also falls back to a cached copy, as huggingface_hub does. A token ($HF_TOKEN,
 * else the file $HF_TOKEN_PATH or $HF_HOME/token) is sent as "Authorization: Bearer" to the Hub
 * (never to the CDN it redirects to), for private and gated repos. A progress bar is drawn on
 * stderr when it is a terminal.
 *
 *     em_ctx *c = em_ctx_create();
 *     char *dir = NULL;
 *     if (em_hub_resolve(c, "Qwen/Qwen3-0.6B", NULL, &dir) != EM_OK)
 *         fprintf(stderr, "%s\n", em_ctx_error(c)->message);   // says what was tried
 *     else { ... open dir/config.json, dir/model.safetensors ...; free(dir); }
 *
 * Errors (recorded in the context, the out-pointer set to NULL): EM_ERR_INVALID_ARG for a
 * malformed id, revision or file name (names that would leave the cache directory: "..", absolute
 * paths, backslashes); EM_ERR_NOT_FOUND for a repo, revision or file the Hub says it does not have
 * (404, or 401 "RepoNotFound", which is also what a private repo looks like without a token), or
 * one not cached in offline mode; EM_ERR_IO for network failures (curl's message), a gated repo
 * (HTTP 401/403: set HF_TOKEN), other HTTP errors, size or checksum mismatches (expected vs got)
 * and file system failures; EM_ERR_FORMAT for server answers that lack or misuse the Hub's
 * headers. A failed download leaves no file in snapshots/ or blobs/ (an interrupted one leaves
 * blobs/<etag>.incomplete, which the next call resumes).
 *
 * Thread safety: every function may be called from several threads at once, each with its own
 * em_ctx, and several processes (Ember or the Python tools) may share one cache: a blob is
 * downloaded under the lock file huggingface_hub uses (<cache>/.locks/models--org--name/<etag>.lock,
 * flock), blobs and refs appear by rename. The environment is read during each call: do not
 * change it (setenv) while calls run. libcurl is initialised once, on first use.
 */
#ifndef EMBER_HUB_H
#define EMBER_HUB_H

#include "ember/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** How to reach the Hub. Plain data; start from em_hub_default_options(). */
typedef struct em_hub_options {
    const char *cache_dir; /* NULL: from the environment (see above) */
    const char *endpoint;  /* NULL: $HF_ENDPOINT, else "https://huggingface.co" */
    const char *token;     /* NULL: $HF_TOKEN, else the token file; "": send no token */
    int offline;           /* -1: $HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is 1/ON/YES/TRUE;
                              0: may download; 1: never touch the network */
    int progress;          /* -1: a bar on stderr when stderr is a terminal; 0: quiet; 1: always */
    long timeout_s;        /* seconds to connect, get metadata, or wait for data; 0: 10
                              ($HF_HUB_ETAG_TIMEOUT / $HF_HUB_DOWNLOAD_TIMEOUT when set) */
} em_hub_options;

/** All fields at their "from the environment" defaults. */
EM_API em_hub_options em_hub_default_options(void);

/**
 * Path of one file of a repo, downloading it into the cache if it is missing:
 * <cache>/models--org--name/snapshots/<commit>/<filename> (the symlink, as hf_hub_download
 * returns it), or <dir>/<filename> when `id` is a local directory. `filename` is the path inside
 * the repo ("config.json", "1_Pooling/config.json"). `opts` may be NULL (defaults).
 * On success *out_path is a string the caller frees with em_free(); on failure it is NULL and the
 * error is recorded in `c` (see the top of this file).
 */
EM_API em_status em_hub_file(em_ctx *c, const char *id, const char *filename,
                             const em_hub_options *opts, char **out_path);

/**
 * Makes sure files of a repo are present and returns the directory holding them (the snapshot
 * of one commit: a branch or tag is resolved once, then every file is taken at that commit).
 * `required` and `optional` are NULL-terminated lists of repo file names, either may be NULL; a
 * required file the repo lacks is an error, an optional one is skipped (and remembered under
 * .no_exist as huggingface_hub does); an optional file that cannot be looked up (offline and not
 * cached, or the Hub unreachable) is skipped too. On success *out_dir is a string the caller
 * frees with em_free(); on failure it is NULL, the error is recorded, and files already fetched
 * stay cached.
 */
EM_API em_status em_hub_ensure(em_ctx *c, const char *id, const char *const *required,
                               const char *const *optional, const em_hub_options *opts,
                               char **out_dir);

/**
 * The directory of a model ready to load: config.json (required); generation_config.json,
 * tokenizer.json, tokenizer_config.json, special_tokens_map.json, chat_template.jinja (when the
 * repo has them); and the weights: model.safetensors, else model.safetensors.index.json and
 * every shard its weight_map names. A local directory is checked for the same files. On success
 * *out_dir is a string the caller frees with em_free(); on failure it is NULL and the error names
 * the file that is missing and where it was looked for.
 */
EM_API em_status em_hub_resolve(em_ctx *c, const char *id, const em_hub_options *opts,
                                char **out_dir);

/**
 * The Hub cache directory these options resolve to (see above), whether or not it exists.
 * Returns a string the caller frees with em_free(), or NULL when out of memory.
 */
EM_API char *em_hub_cache_dir(const em_hub_options *opts);

#ifdef __cplusplus
}
#endif
#endif
