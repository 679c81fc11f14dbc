/*
 * llama.cpp's llama-server as the peer of `ember bench serve`: a child process on the same GGUF
 * file, loopback only, with the thread count and parallel slots Ember's server gets, so the same
 * client phases can be replayed against it. Found like llama-bench for `ember bench decode`
 * ($EMBER_LLAMA_SERVER, else PATH). The child is always stopped and reaped: on success, on
 * every error path, and (Linux) by the kernel when the benchmark dies first.
 */
#include "bench_serve_peer.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "bench_util.h"

/* The llama-server executable into p->exe, or false with p->why. An explicit
 * $EMBER_LLAMA_SERVER that is not executable is reported as such (no fallback to PATH: the
 * user asked for that one). */
static bool find_server(serve_peer *p) {
    const char *e = getenv("EMBER_LLAMA_SERVER");
    if (e && *e) {
        if (access(e, X_OK) == 0) {
            snprintf(p->exe, sizeof p->exe, "%s", e);
            return true;
        }
        snprintf(p->why, sizeof p->why, "$EMBER_LLAMA_SERVER=%.400s is not an executable file",
                 e);
        return false;
    }
    const char *path = getenv("PATH");
    for (const char *s = path; s && *s;) {
        const char *colon = strchr(s, ':');
        size_t len = colon ? (size_t)(colon - s) : strlen(s);
        snprintf(p->exe, sizeof p->exe, "%.*s/llama-server", (int)len, s);
        if (len && access(p->exe, X_OK) == 0) return true;
        s = colon ? colon + 1 : s + len;
    }
    snprintf(p->why, sizeof p->why, "llama-server is neither on PATH nor in $EMBER_LLAMA_SERVER");
    return false;
}

/* A loopback port nobody listens on now (the kernel's pick; another process could take it
 * before the child binds it, which the child then reports as a failed start). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    int port = -1;
    if (!bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &n))
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* The last non-empty line of the child's log (why it failed, in its words). */
static void log_tail(const serve_peer *p, char *out, size_t n) {
    out[0] = 0;
    char buf[4096];
    off_t end = lseek(p->log_fd, 0, SEEK_END), at = end > (off_t)sizeof buf - 1
                                                      ? end - (off_t)(sizeof buf - 1)
                                                      : 0;
    ssize_t got = end > 0 ? pread(p->log_fd, buf, sizeof buf - 1, at) : 0;
    size_t len = got > 0 ? (size_t)got : 0;
    buf[len] = 0;
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r' || buf[len - 1] == ' '))
        buf[--len] = 0;
    char *nl = strrchr(buf, '\n'), *last = nl ? nl + 1 : buf;
    size_t ll = strlen(last);
    if (ll >= n) ll = n - 1; /* a long line keeps its start */
    memcpy(out, last, ll);
    out[ll] = 0;
}

/* The version `llama-server --version` prints ("version: 0.5.0-dev (build 1, commit 0c1e570)"
 * on its first line), or "" when it prints none. */
static void read_version(serve_peer *p) {
    if (strchr(p->exe, '\'')) return;
    char cmd[1100], line[256];
    snprintf(cmd, sizeof cmd, "'%s' --version 2>&1 </dev/null", p->exe);
    FILE *f = popen(cmd, "r");
    while (f && fgets(line, sizeof line, f)) {
        char *v = strstr(line, "version: ");
        if (!v || p->version[0]) continue; /* read to the end: pclose then reaps it at once */
        v += 9;
        v[strcspn(v, "\r\n")] = 0;
        snprintf(p->version, sizeof p->version, "%.120s", v);
    }
    if (f) pclose(f);
}

static size_t discard(char *d, size_t s, size_t n, void *u) {
    (void)d, (void)u;
    return s * n;
}

/* HTTP status of GET /health, or 0 when nothing answers yet. */
static long health(int port) {
    CURL *h = curl_easy_init();
    if (!h) return 0;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/health", port);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 5L);
    long code = 0;
    if (curl_easy_perform(h) == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    return code;
}

void serve_peer_stop(serve_peer *p) {
    if (p->pid > 0) {
        kill(p->pid, SIGTERM);
        int st;
        pid_t got = 0;
        for (int i = 0; i < 200 && (got = waitpid(p->pid, &st, WNOHANG)) == 0; i++)
            usleep(50000); /* 10 s for its own shutdown */
        if (got == 0) {
            kill(p->pid, SIGKILL);
            while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR) {}
        }
        p->pid = 0;
    }
    if (p->log_fd > 0) close(p->log_fd);
    p->log_fd = 0;
}

bool serve_peer_start(const char *gguf, int threads, int parallel, int ctx, serve_peer *p) {
    memset(p, 0, sizeof *p);
    if (!find_server(p)) return false;
    size_t gl = strlen(gguf);
    if (gl < 5 || strcmp(gguf + gl - 5, ".gguf")) {
        snprintf(p->why, sizeof p->why, "the model is not a GGUF file");
        return false;
    }
    read_version(p);
    p->port = free_port();
    if (p->port <= 0) {
        snprintf(p->why, sizeof p->why, "no free loopback port: %s", strerror(errno));
        return false;
    }
    /* its log is a file without a name (unlinked at once): nothing is left behind even when
     * the benchmark is killed; close-on-exec keeps it out of other children */
    char log[] = "/tmp/ember-llama-server-XXXXXX";
    int fd = mkostemp(log, O_CLOEXEC);
    if (fd < 0) {
        snprintf(p->why, sizeof p->why, "cannot create a log file: %s", strerror(errno));
        return false;
    }
    unlink(log);
    p->log_fd = fd;
    /* everything the child needs is made before fork: it only calls async-signal-safe functions */
    char port_s[16], t_s[16], np_s[16], c_s[24];
    snprintf(port_s, sizeof port_s, "%d", p->port);
    snprintf(t_s, sizeof t_s, "%d", threads);
    snprintf(np_s, sizeof np_s, "%d", parallel);
    snprintf(c_s, sizeof c_s, "%d", ctx);
    char *args[] = {p->exe,       "-m", (char *)gguf, "--host", "127.0.0.1", "--port", port_s,
                    "-t",         t_s,  "-np",        np_s,     "-c",        c_s,      NULL};
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
#ifdef __linux__
        /* the kernel kills it if the benchmark dies without stopping it */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
#endif
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(args[0], args);
        _exit(127);
    }
    (void)parent;
    if (pid < 0) {
        snprintf(p->why, sizeof p->why, "fork: %s", strerror(errno));
        serve_peer_stop(p);
        return false;
    }
    p->pid = pid;
    double t0 = bench_now();
    while (bench_now() - t0 < 180) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            p->pid = 0;
            char tail[400];
            log_tail(p, tail, sizeof tail);
            snprintf(p->why, sizeof p->why, "%.300s exited with %d before it served: %s",
                     p->exe, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st),
                     tail[0] ? tail : "no output");
            serve_peer_stop(p);
            return false;
        }
        if (health(p->port) == 200) return true;
        usleep(100000);
    }
    snprintf(p->why, sizeof p->why, "%.300s did not answer /health within 180 s", p->exe);
    serve_peer_stop(p);
    return false;
}
