/* HTTP for the Hub client, with libcurl: the metadata HEAD (huggingface_hub's
 * get_hf_file_metadata) and the resumable, checked download (its http_get). */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/tensor_impl.h"
#include "io/hub/hub_internal.h"

/* ---- one-time initialisation -------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc; /* written once under curl_once, read after it */

static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static CURL *easy_new(em_ctx *c, const char *op) {
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        EM_FAIL(c, EM_ERR_INTERNAL, op, "libcurl failed to initialise: %s",
                curl_easy_strerror(curl_init_rc));
        return NULL;
    }
    CURL *h = curl_easy_init();
    if (!h) EM_FAIL(c, EM_ERR_OOM, op, "libcurl could not create a handle");
    return h;
}

/* ---- origins ------------------------------------------------------------------------------ */

/* scheme://host:port of a URL, lower case, with the scheme's default port. false if unparsable. */
static bool origin_of(const char *url, char *out, size_t size) {
    CURLU *u = curl_url();
    if (!u) return false;
    char *scheme = NULL, *host = NULL, *port = NULL;
    bool ok = curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK;
    if (ok) {
        snprintf(out, size, "%s://%s:%s", scheme, host, port);
        for (char *p = out; *p; p++)
            if (*p >= 'A' && *p <= 'Z') *p = (char)(*p + 32);
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return ok;
}

/* huggingface_hub's _is_same_or_hub_host: the token may go to `target` when it is on the origin
 * of `from` or on a Hub origin (the configured endpoint, huggingface.co, hf.co, the staging Hub). */
static bool same_or_hub_origin(const hub_repo *r, const char *from, const char *target) {
    char t[512], o[512];
    if (!origin_of(target, t, sizeof t)) return false;
    if (origin_of(from, o, sizeof o) && !strcmp(o, t)) return true;
    const char *hubs[] = {r->endpoint, "https://huggingface.co", "https://hub-ci.huggingface.co",
                          "https://hf.co"};
    for (size_t i = 0; i < sizeof hubs / sizeof hubs[0]; i++)
        if (origin_of(hubs[i], o, sizeof o) && !strcmp(o, t)) return true;
    return false;
}

static struct curl_slist *base_headers(const hub_repo *r, bool send_token, bool *oom) {
    struct curl_slist *l = NULL, *n;
    char ua[64];
    snprintf(ua, sizeof ua, "User-Agent: ember/%s", em_version());
    /* the real size of the file, not a compressed one */
    *oom = !(n = curl_slist_append(l, "Accept-Encoding: identity")) || !(l = n) ||
           !(n = curl_slist_append(l, ua)) || !(l = n);
    if (!*oom && send_token && r->token) {
        char *auth = hub_strf("Authorization: Bearer %s", r->token);
        *oom = !auth || !(n = curl_slist_append(l, auth)) || !(l = n);
        if (auth) {
            memset(auth, 0, strlen(auth));
            free(auth);
        }
    }
    return l;
}

/* ---- HEAD --------------------------------------------------------------------------------- */

static void set_field(hub_meta *m, char *dst, size_t size, const char *v, size_t n) {
    if (n >= size) {
        m->oversized_header = true;
        n = size - 1;
    }
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* Keeps the headers of the last response (a new status line starts a new response). */
static size_t head_header_cb(char *line, size_t sz, size_t nitems, void *ud) {
    hub_meta *m = ud;
    size_t n = sz * nitems;
    if (n >= 5 && !strncmp(line, "HTTP/", 5)) {
        m->commit[0] = m->etag[0] = m->error_code[0] = m->error_message[0] = '\0';
        m->size = -1;
        m->oversized_header = m->etag_linked = m->size_linked = false;
        return n;
    }
    const char *colon = memchr(line, ':', n);
    if (!colon) return n;
    size_t klen = (size_t)(colon - line);
    const char *v = colon + 1;
    size_t vlen = n - klen - 1;
    while (vlen && (*v == ' ' || *v == '\t')) v++, vlen--;
    while (vlen && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' ')) vlen--;
#define IS(name) (klen == sizeof name - 1 && !strncasecmp(line, name, klen))
    if (IS("X-Repo-Commit")) {
        set_field(m, m->commit, sizeof m->commit, v, vlen);
    } else if (IS("X-Linked-Etag") || (IS("ETag") && !m->etag_linked)) {
        /* _normalize_etag: drop a weak marker W/ and the quotes */
        if (vlen >= 2 && v[0] == 'W' && v[1] == '/') v += 2, vlen -= 2;
        while (vlen && *v == '"') v++, vlen--;
        while (vlen && v[vlen - 1] == '"') vlen--;
        set_field(m, m->etag, sizeof m->etag, v, vlen);
        if (IS("X-Linked-Etag")) m->etag_linked = true;
    } else if (IS("X-Linked-Size") || (IS("Content-Length") && !m->size_linked)) {
        char num[32];
        size_t k = vlen < sizeof num - 1 ? vlen : sizeof num - 1;
        memcpy(num, v, k);
        num[k] = '\0';
        char *end;
        long long s = strtoll(num, &end, 10);
        m->size = end != num && *end == '\0' && s >= 0 ? s : -1;
        if (IS("X-Linked-Size")) m->size_linked = true;
    } else if (IS("X-Error-Code")) {
        set_field(m, m->error_code, sizeof m->error_code, v, vlen);
    } else if (IS("X-Error-Message")) {
        /* only shown in messages: shorten rather than reject */
        size_t k = vlen < sizeof m->error_message - 1 ? vlen : sizeof m->error_message - 1;
        memcpy(m->error_message, v, k);
        m->error_message[k] = '\0';
    }
#undef IS
    return n;
}

em_status hub_http_head(em_ctx *c, const char *op, const hub_repo *r, const char *url,
                        hub_meta *m) {
    memset(m, 0, sizeof *m);
    m->size = -1;
    char *cur = strdup(url);
    if (!cur) return EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
    CURL *h = easy_new(c, op);
    if (!h) {
        free(cur);
        return em_ctx_status(c);
    }
    em_status st = EM_OK;
    for (int hop = 0;; hop++) {
        if (hop == 10) {
            m->curl_code = CURLE_TOO_MANY_REDIRECTS;
            snprintf(m->curl_error, sizeof m->curl_error, "more than 10 redirects");
            break;
        }
        bool oom;
        struct curl_slist *hdrs = base_headers(r, same_or_hub_origin(r, url, cur), &oom);
        if (oom) {
            curl_slist_free_all(hdrs);
            st = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
            break;
        }
        curl_easy_reset(h);
        char errbuf[CURL_ERROR_SIZE] = "";
        curl_easy_setopt(h, CURLOPT_URL, cur);
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, head_header_cb);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, m);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, r->timeout_s);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, r->timeout_s);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* no SIGALRM: we may run in any thread */
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        CURLcode rc = curl_easy_perform(h);
        curl_slist_free_all(hdrs);
        if (rc != CURLE_OK) {
            m->curl_code = (int)rc;
            snprintf(m->curl_error, sizeof m->curl_error, "%s",
                     *errbuf ? errbuf : curl_easy_strerror(rc));
            break;
        }
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &m->status);
        char *target = NULL;
        curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &target);
        if (m->status / 100 == 3 && target) {
            bool internal = same_or_hub_origin(r, cur, target);
            char *next = strdup(target);
            if (!next) {
                st = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
                break;
            }
            free(cur);
            cur = next;
            if (internal) continue;
            /* a CDN: the metadata is on this redirect; the token must not follow it there */
            m->off_hub = true;
            if (!m->size_linked) m->size = -1; /* a redirect's Content-Length is not the file's */
            break;
        }
        break;
    }
    curl_easy_cleanup(h);
    if (st == EM_OK) {
        m->download_url = cur;
        cur = NULL;
    }
    free(cur);
    return st;
}

void hub_meta_free(hub_meta *m) {
    free(m->download_url);
    m->download_url = NULL;
}

/* ---- GET ---------------------------------------------------------------------------------- */

typedef struct dl_state {
    CURL *h;
    int fd;
    int64_t offset;    /* bytes in the file when this request started */
    int64_t got;       /* bytes written by this request */
    int64_t total;     /* expected size of the whole file, -1 unknown */
    bool started;      /* the first body byte of this response was seen */
    bool bad_response; /* the response is not one to write: stop */
    long status;
    int64_t range_start; /* from Content-Range, -1 if none */
    int64_t range_total; /* from Content-Range, -1 if none */
    int write_errno;
    hub_sha256 *sha;
    /* progress */
    bool progress;
    const char *label;
    struct timespec t0, last;
    int64_t bar_start; /* bytes present when the bar started */
} dl_state;

static size_t get_header_cb(char *line, size_t sz, size_t nitems, void *ud) {
    dl_state *s = ud;
    size_t n = sz * nitems;
    if (n >= 5 && !strncmp(line, "HTTP/", 5)) {
        s->range_start = s->range_total = -1;
    } else if (n > 14 && !strncasecmp(line, "Content-Range:", 14)) {
        long long a, b, t;
        if (sscanf(line + 14, " bytes %lld-%lld/%lld", &a, &b, &t) == 3) {
            s->range_start = a;
            s->range_total = t;
        }
    }
    return n;
}

static double secs_since(const struct timespec *a) {
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a->tv_sec) + (double)(b.tv_nsec - a->tv_nsec) * 1e-9;
}

static void human(char *buf, size_t size, double v) {
    const char *unit[] = {"B", "kB", "MB", "GB", "TB"};
    int u = 0;
    while (v >= 1000 && u < 4) v /= 1000, u++;
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

static void draw_bar(dl_state *s, bool final) {
    int64_t now = s->offset + s->got;
    double dt = secs_since(&s->t0);
    char a[32], b[32], rate[32];
    human(a, sizeof a, (double)now);
    human(rate, sizeof rate, dt > 0 ? (double)(now - s->bar_start) / dt : 0);
    const char *lab = s->label;
    size_t ll = strlen(lab);
    const char *dots = ll > 40 ? "..." : "";
    if (ll > 40) lab += ll - 40;
    if (s->total > 0) {
        human(b, sizeof b, (double)s->total);
        int pct = (int)(100.0 * (double)now / (double)s->total);
        int fill = pct / 5;
        fprintf(stderr, "\r%s%s: %3d%% [%.*s%*s] %s / %s, %s/s ", dots, lab, pct, fill,
                "====================", 20 - fill, "", a, b, rate);
    } else {
        fprintf(stderr, "\r%s%s: %s, %s/s ", dots, lab, a, rate);
    }
    if (final) fputc('\n', stderr);
    fflush(stderr);
}

static int xferinfo_cb(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
    dl_state *s = ud;
    if (s->progress && secs_since(&s->last) >= 0.2) {
        clock_gettime(CLOCK_MONOTONIC, &s->last);
        draw_bar(s, false);
    }
    return 0;
}

static size_t write_cb(char *data, size_t sz, size_t nitems, void *ud) {
    dl_state *s = ud;
    size_t n = sz * nitems;
    if (!s->started) {
        s->started = true;
        curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &s->status);
        if (s->status == 200 && s->offset > 0) {
            /* the server ignored our Range: start the file over (huggingface_hub does the same) */
            if (ftruncate(s->fd, 0) != 0 || lseek(s->fd, 0, SEEK_SET) != 0) {
                s->write_errno = errno;
                return 0;
            }
            s->offset = 0;
            if (s->sha) hub_sha256_init(s->sha);
        } else if (s->status == 206 && s->range_start != s->offset) {
            s->bad_response = true; /* a range we did not ask for */
            return 0;
        } else if (s->status != 200 && s->status != 206) {
            s->bad_response = true;
            return 0;
        }
        if (s->total < 0 && s->range_total >= 0) s->total = s->range_total;
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = write(s->fd, data + done, n - done);
        if (w < 0) {
            if (errno == EINTR) continue;
            s->write_errno = errno;
            return 0;
        }
        done += (size_t)w;
    }
    if (s->sha) hub_sha256_update(s->sha, data, n);
    s->got += (int64_t)n;
    return n;
}

/* Failures worth another try from where the file stopped (huggingface_hub retries connection
 * errors, timeouts and protocol errors while streaming). */
static bool transient(CURLcode rc) {
    return rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR ||
           rc == CURLE_GOT_NOTHING || rc == CURLE_OPERATION_TIMEDOUT ||
           rc == CURLE_COULDNT_CONNECT || rc == CURLE_HTTP2 || rc == CURLE_HTTP2_STREAM ||
           rc == CURLE_SSL_CONNECT_ERROR;
}

/* Hashes the first n bytes already in the file (a resumed download). */
static bool hash_prefix(int fd, int64_t n, hub_sha256 *sha) {
    char buf[1 << 16];
    if (lseek(fd, 0, SEEK_SET) != 0) return false;
    while (n > 0) {
        ssize_t k = read(fd, buf, n < (int64_t)sizeof buf ? (size_t)n : sizeof buf);
        if (k <= 0) return false;
        hub_sha256_update(sha, buf, (size_t)k);
        n -= k;
    }
    return lseek(fd, 0, SEEK_END) >= 0;
}

em_status hub_http_download(em_ctx *c, const char *op, const hub_repo *r, const char *url,
                            bool send_token, const char *path, int64_t expected_size,
                            const char *sha256_hex, const char *label) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return EM_FAIL(c, EM_ERR_IO, op, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return EM_FAIL(c, EM_ERR_IO, op, "cannot stat %s: %s", path, strerror(errno));
    }
    dl_state s = {.fd = fd, .offset = st.st_size, .total = expected_size, .progress = r->progress,
                  .label = label};
    hub_sha256 sha;
    if (sha256_hex) {
        hub_sha256_init(&sha);
        s.sha = &sha;
    }
    if (expected_size >= 0 && s.offset > expected_size) {
        /* a stale partial file longer than the blob: start over */
        if (ftruncate(fd, 0) != 0) {
            close(fd);
            return EM_FAIL(c, EM_ERR_IO, op, "cannot truncate %s: %s", path, strerror(errno));
        }
        s.offset = 0;
    }
    if (s.sha && s.offset > 0 && !hash_prefix(fd, s.offset, s.sha)) {
        close(fd);
        return EM_FAIL(c, EM_ERR_IO, op, "cannot read back %s: %s", path, strerror(errno));
    }
    if (lseek(fd, s.offset, SEEK_SET) < 0) {
        close(fd);
        return EM_FAIL(c, EM_ERR_IO, op, "cannot seek in %s: %s", path, strerror(errno));
    }
    CURL *h = easy_new(c, op);
    if (!h) {
        close(fd);
        return em_ctx_status(c);
    }
    s.h = h;
    clock_gettime(CLOCK_MONOTONIC, &s.t0);
    s.last = s.t0;
    s.bar_start = s.offset;
    em_status result = EM_OK;
    int tries_left = 5;
    bool restarted_416 = false;
    while (!(expected_size >= 0 && s.offset == expected_size)) {
        bool oom;
        struct curl_slist *hdrs = base_headers(r, send_token, &oom);
        if (oom) {
            curl_slist_free_all(hdrs);
            result = EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
            break;
        }
        char range[48], errbuf[CURL_ERROR_SIZE] = "";
        snprintf(range, sizeof range, "%lld-", (long long)s.offset);
        s.got = 0;
        s.started = s.bad_response = false;
        s.status = 0;
        s.range_start = s.range_total = -1;
        curl_easy_reset(h);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        /* a CDN may redirect again; curl keeps our Authorization header on the first host only */
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
        if (s.offset > 0) curl_easy_setopt(h, CURLOPT_RANGE, range);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_cb);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, get_header_cb);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &s);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, r->timeout_s);
        /* no overall limit for big files: give up when no byte came for timeout_s */
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, r->timeout_s);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, r->progress ? 0L : 1L);
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, xferinfo_cb);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, &s);
        CURLcode rc = curl_easy_perform(h);
        curl_slist_free_all(hdrs);
        if (!s.started) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &s.status);
        s.offset += s.got;
        int64_t got_now = s.got;
        s.got = 0; /* counted in offset from here on */
        if (s.write_errno) {
            result = EM_FAIL(c, EM_ERR_IO, op, "cannot write %s: %s", path,
                             strerror(s.write_errno));
            break;
        }
        if (rc == CURLE_OK && s.status == 416 && !restarted_416) {
            /* the partial file does not fit the blob any more: start over, once */
            restarted_416 = true;
            if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0) {
                result = EM_FAIL(c, EM_ERR_IO, op, "cannot truncate %s: %s", path,
                                 strerror(errno));
                break;
            }
            s.offset = 0;
            if (s.sha) hub_sha256_init(s.sha);
            continue;
        }
        if (s.bad_response || (rc == CURLE_OK && s.status != 200 && s.status != 206)) {
            if (s.status == 206)
                result = EM_FAIL(c, EM_ERR_FORMAT, op, "asked %.200s for bytes %lld- of %s and "
                                 "got a range starting at %lld", url, (long long)s.offset, label,
                                 (long long)s.range_start);
            else
                result = EM_FAIL(c, EM_ERR_IO, op, "HTTP %ld while downloading %s from %.200s",
                                 s.status, label, url);
            break;
        }
        if (rc == CURLE_OK) {
            if (expected_size < 0 && s.total < 0) {
                curl_off_t cl = -1;
                curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
                if (cl >= 0) s.total = s.offset - got_now + cl;
            }
            break;
        }
        if (!transient(rc)) {
            result = EM_FAIL(c, EM_ERR_IO, op, "network failure downloading %s from %.200s: %s "
                             "(curl error %d)", label, url, *errbuf ? errbuf : curl_easy_strerror(rc),
                             (int)rc);
            break;
        }
        /* as huggingface_hub: a few more tries, counted afresh whenever data arrived */
        tries_left = got_now > 0 ? 5 : tries_left - 1;
        if (tries_left < 0) {
            result = EM_FAIL(c, EM_ERR_IO, op, "network failure downloading %s from %.200s, "
                             "gave up after 5 retries without progress at byte %lld: %s (curl "
                             "error %d); run again to resume", label, url, (long long)s.offset,
                             *errbuf ? errbuf : curl_easy_strerror(rc), (int)rc);
            break;
        }
        struct timespec pause = {0, 200000000L * (5 - tries_left)};
        nanosleep(&pause, NULL);
    }
    if (s.progress && result == EM_OK) draw_bar(&s, true);
    else if (s.progress) fputc('\n', stderr);
    curl_easy_cleanup(h);
    if (close(fd) != 0 && result == EM_OK)
        result = EM_FAIL(c, EM_ERR_IO, op, "cannot write %s: %s", path, strerror(errno));
    if (result != EM_OK) return result;

    int64_t want = expected_size >= 0 ? expected_size : s.total;
    if (want >= 0 && s.offset != want) {
        unlink(path);
        return EM_FAIL(c, EM_ERR_IO, op, "size mismatch for %s: expected %lld bytes, got %lld "
                       "(from %.200s); the partial file was removed, run again", label,
                       (long long)want, (long long)s.offset, url);
    }
    if (s.sha) {
        char got[65];
        hub_sha256_final_hex(s.sha, got);
        if (strcmp(got, sha256_hex) != 0) {
            unlink(path);
            return EM_FAIL(c, EM_ERR_IO, op, "checksum mismatch for %s: expected sha256 %s, got "
                           "%s (downloaded from %.200s); the corrupt file was removed, run again",
                           label, sha256_hex, got, url);
        }
    }
    return EM_OK;
}
