/* llama.cpp's llama-server as the peer of `ember bench serve` (bench_serve_peer.c). */
#ifndef EMBER_BENCH_SERVE_PEER_H
#define EMBER_BENCH_SERVE_PEER_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct serve_peer {
    pid_t pid;         /* the child while it runs, else 0 */
    int port;          /* its loopback port */
    char exe[1024];    /* the llama-server that runs */
    char version[128]; /* what its --version says, e.g. "0.5.0-dev (build 1, commit 0c1e570)" */
    int log_fd;        /* its stdout and stderr: an unlinked temporary file, closed by stop */
    char why[600];     /* why it is unavailable */
} serve_peer;

/* Finds llama-server ($EMBER_LLAMA_SERVER, else on PATH), starts it on gguf at a free loopback
 * port with `threads` threads, `parallel` slots and `ctx` positions in all, and waits (up to
 * 180 s) until its /health answers 200. Returns true when it serves; otherwise false with p->why
 * set and no child left running. Needs curl_global_init. */
bool serve_peer_start(const char *gguf, int threads, int parallel, int ctx, serve_peer *p);
/* Stops the child (SIGTERM, SIGKILL after 10 s), reaps it and closes its log. Safe to call
 * when it is not running. */
void serve_peer_stop(serve_peer *p);

#endif
