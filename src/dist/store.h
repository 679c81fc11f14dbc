/*
 * The process group's key-value store: rank 0 runs a small TCP server (a thread) holding the
 * map; every rank, rank 0 included, is a client. One request, one answer, over one connection
 * per rank, so a rank that dies closes its connection and the server tells every other rank
 * (their calls fail naming it). All waits are bounded by deadlines; nothing blocks forever.
 */
#ifndef EMBER_DIST_STORE_H
#define EMBER_DIST_STORE_H

#include <stddef.h>

#include "ember/core.h"

typedef struct em_store em_store;               /* a rank's connection */
typedef struct em_store_server em_store_server; /* rank 0's server */

/* Listens on host:port (port 0: any free port, written to *bound) for `world` ranks. */
em_status em_store_server_start(em_ctx *c, const char *host, int port, int world,
                                em_store_server **out, int *bound);
/* Lets the server finish: it ends when every rank has left or died, or linger_s after this
 * call, whichever comes first; returns when it has ended and frees it. NULL is ignored. */
void em_store_server_stop(em_store_server *s, double linger_s);

/* Connects as `rank` (retrying while the server is not up yet) and waits until all `world`
 * ranks have connected; at most timeout_s in all. */
em_status em_store_connect(em_ctx *c, const char *host, int port, int rank, int world,
                           double timeout_s, em_store **out);
em_status em_store_put(em_ctx *c, em_store *s, const char *key, const void *v, size_t n);
em_status em_store_get(em_ctx *c, em_store *s, const char *key, double timeout_s, void **v,
                       size_t *n);
em_status em_store_barrier(em_ctx *c, em_store *s, double timeout_s);
/* Says goodbye (a rank that leaves this way is not a dead peer) and frees. NULL is ignored. */
void em_store_close(em_store *s);

#endif
