/*
 * Private pieces of the Hub client (include/ember/hub.h): settings from the environment, name
 * checks, the cache layout, HTTP and sha256. Each .c file is one of these concerns.
 */
#ifndef EMBER_IO_HUB_INTERNAL_H
#define EMBER_IO_HUB_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/core.h"
#include "ember/hub.h"

/* ---- settings (hub_env.c) ---------------------------------------------------------------- */

/* Everything one call needs to know, resolved once from the options and the environment. */
typedef struct hub_repo {
    /* what was asked */
    char repo_id[200];   /* "org/name" (or "name") */
    char revision[256];  /* "main" when none was given */
    char *local_dir;     /* the id named a local directory: its path (then nothing below is used) */
    /* where and how */
    char *cache_dir;     /* the Hub cache root */
    char *storage;       /* <cache_dir>/models--org--name */
    char *endpoint;      /* "https://huggingface.co", no trailing '/' */
    char *token;         /* NULL: none */
    char token_source[96]; /* "HF_TOKEN", "the token file /x/token", "the options" */
    bool offline;
    char offline_why[48]; /* "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "the offline option" */
    bool progress;
    long timeout_s;
} hub_repo;

/* Parses `id` ("org/name", "org/name@rev" or a local directory) and gathers the settings.
 * `op` names the public function in errors. Free with hub_repo_free. */
em_status hub_repo_init(em_ctx *c, const char *op, const char *id, const em_hub_options *opts,
                        hub_repo *r);
void hub_repo_free(hub_repo *r);

/* True when an environment value means "on" for huggingface_hub ("1", "ON", "YES", "TRUE"). */
bool hub_env_true(const char *v);
/* os.path.expanduser + os.path.expandvars of a path, as huggingface_hub applies them. malloc'd. */
char *hub_expand_path(const char *p);

/* ---- names (hub_names.c) ------------------------------------------------------------------ */

/* huggingface_hub's validate_repo_id: "name" or "ns/name", [A-Za-z0-9_.-]{1,96} per part,
 * starting and ending with [A-Za-z0-9_], no "--" or "..", not ending in ".git". On failure
 * writes the reason to why. */
bool hub_valid_repo_id(const char *id, char *why, size_t why_size);
/* A repo file name or revision that stays inside the directory it is joined to: relative,
 * '/'-separated, no empty, "." or ".." segment, no backslash, no drive ("C:"), no control
 * characters. */
bool hub_valid_rel_path(const char *p, char *why, size_t why_size);
/* A single path segment taken from a server header (etag, commit): [A-Za-z0-9._-]{1,128}, not
 * starting with '.'. */
bool hub_valid_segment(const char *s);
/* 40 lower-case hex digits: a full commit hash (huggingface_hub's REGEX_COMMIT_HASH). */
bool hub_is_commit(const char *s);
/* 64 lower-case hex digits: an LFS etag, which is the file's sha256. */
bool hub_is_sha256(const char *s);
/* Appends `s` percent-encoded to buf as Python's urllib.parse.quote(s, safe=keep_slash ? "/" :
 * ""). Returns false if it does not fit. */
bool hub_quote(char *buf, size_t size, const char *s, bool keep_slash);

/* ---- the cache layout (hub_cache.c) ------------------------------------------------------- */

/* malloc'd "a/b" (NULL when out of memory). */
char *hub_join(const char *a, const char *b);
/* malloc'd printf. */
char *hub_strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* mkdir -p of a directory. */
/* A short name part unique to this call, for temporary files next to their destination. */
void hub_unique_suffix(char *buf, size_t size);
/* True if the path exists (following symlinks, as os.path.exists). */
bool hub_exists(const char *path);
/* <storage>/snapshots/<commit>/<filename>, malloc'd. */
char *hub_pointer_path(const hub_repo *r, const char *commit, const char *filename);
/* Reads refs/<revision>. Returns EM_OK with the commit, EM_ERR_NOT_FOUND (nothing recorded) when
 * there is no such ref, EM_ERR_FORMAT (recorded) when it holds something that is not a name. */
em_status hub_read_ref(em_ctx *c, const char *op, const hub_repo *r, const char *revision,
                       char commit[129]);
/* Writes refs/<revision> = commit atomically, unless revision is that commit or already says so. */
em_status hub_write_ref(em_ctx *c, const char *op, const hub_repo *r, const char *revision,
                        const char *commit);
/* The commit a revision stands for in the cache: itself when it is a full commit hash, else
 * refs/<revision>. false when neither. */
bool hub_cached_commit(const hub_repo *r, const char *revision, char commit[129]);
/* .no_exist/<commit>/<filename>: the file is known to be absent from that commit. */
bool hub_no_exist_marked(const hub_repo *r, const char *commit, const char *filename);
void hub_no_exist_mark(const hub_repo *r, const char *commit, const char *filename);
/* CACHEDIR.TAG at the cache root, as huggingface_hub writes it (best effort). */
void hub_cachedir_tag(const hub_repo *r);
/* Makes `pointer` a relative symlink to blobs/<etag> (replacing what was there); copies the
 * blob where the file system has no symlinks, as huggingface_hub does. */
em_status hub_link_pointer(em_ctx *c, const char *op, const hub_repo *r, const char *etag,
                           const char *pointer, const char *filename);
/* Opens and exclusively flock()s <cache>/.locks/models--org--name/<etag>.lock, the lock
 * huggingface_hub takes for the same blob. Returns the descriptor (close it to unlock), -1 on
 * failure (recorded). */
int hub_lock_blob(em_ctx *c, const char *op, const hub_repo *r, const char *etag);

/* ---- HTTP (hub_http.c) -------------------------------------------------------------------- */

/* What a HEAD on a resolve URL says about a file (huggingface_hub's HfFileMetadata). */
typedef struct hub_meta {
    long status;          /* HTTP status of the last response, 0 when none came */
    char commit[129];     /* X-Repo-Commit */
    char etag[129];       /* X-Linked-Etag, else ETag, without W/ and quotes */
    int64_t size;         /* X-Linked-Size, else Content-Length of a non-redirect; -1: unknown */
    char error_code[64];  /* X-Error-Code ("EntryNotFound", "GatedRepo", ...) */
    char error_message[256]; /* X-Error-Message */
    char *download_url;   /* where to GET the content (malloc'd) */
    bool off_hub;         /* download_url is on another origin (a CDN): send no token there */
    bool oversized_header; /* a header value was longer than its field: treated as malformed */
    bool etag_linked;     /* etag came from X-Linked-Etag (an ETag header must not replace it) */
    bool size_linked;     /* size came from X-Linked-Size */
    int curl_code;        /* 0, or the CURLcode of a transport failure */
    char curl_error[256]; /* curl's message for it */
} hub_meta;

/* HEADs `url`, following redirects within the Hub (same origin or a Hub origin) and stopping at
 * one to another origin, whose response carries the metadata. Transport failures and HTTP
 * statuses are reported in `m`, not recorded: the caller decides (cache fallback, messages).
 * Returns EM_OK, or EM_ERR_OOM/EM_ERR_INTERNAL (recorded). Free m with hub_meta_free. */
em_status hub_http_head(em_ctx *c, const char *op, const hub_repo *r, const char *url, hub_meta *m);
void hub_meta_free(hub_meta *m);

/* Downloads `url` into the file at `path`, appending from its current size with a Range request
 * (and starting over if the server ignores it), resuming after dropped connections. Checks the
 * size against `expected_size` (-1: from the response) and, when `sha256_hex` is given, the
 * content's sha256. `label` is the repo file name for the progress bar and messages.
 * On a checksum mismatch the partial file is removed. Records every failure. */
em_status hub_http_download(em_ctx *c, const char *op, const hub_repo *r, const char *url,
                            bool send_token, const char *path, int64_t expected_size,
                            const char *sha256_hex, const char *label);

/* ---- sha256 (hub_sha256.c) ---------------------------------------------------------------- */

typedef struct hub_sha256 {
    uint32_t h[8];
    uint64_t len;
    unsigned char buf[64];
    size_t nbuf;
} hub_sha256;
void hub_sha256_init(hub_sha256 *s);
void hub_sha256_update(hub_sha256 *s, const void *data, size_t n);
/* Writes 64 lower-case hex digits and a NUL. */
void hub_sha256_final_hex(hub_sha256 *s, char hex[65]);

#endif
