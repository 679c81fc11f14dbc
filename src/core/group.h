/*
 * Process groups as the op table sees them: a collective op (all_reduce, ...) carries its group
 * as an integer attribute, an id in this registry, so its shape rule can ask the group's size and
 * a backend's kernel how to reach the other members. The registry is filled by the process-group
 * layer (src/dist/) when a group is made and emptied when it is freed; core names no transport.
 */
#ifndef EMBER_CORE_GROUP_H
#define EMBER_CORE_GROUP_H

#include <stdbool.h>
#include <stddef.h>

#include "ember/core.h"

/* How the members of a group exchange tensors. */
typedef enum em_group_transport {
    EM_GROUP_STORE_ONLY = 0, /* a key-value store only (TCP bootstrap without MPI): no collectives */
    EM_GROUP_MPI = 1         /* MPI_COMM_WORLD of this process (the group is the whole world) */
} em_group_transport;

typedef struct em_group_info {
    int rank, size;
    em_group_transport transport;
} em_group_info;

/* Registers a group; returns its id (> 0), or 0 when the registry is full (EM_GROUP_MAX). */
#define EM_GROUP_MAX 16
int em_group_register(const em_group_info *g);
/* Removes a group; unknown ids are ignored. */
void em_group_unregister(int id);
/* Copies the group's description into *out; false when id names no live group. */
bool em_group_lookup(int id, em_group_info *out);

/*
 * The process's key-value store, for PJRT plugins (the kv_get/kv_put callbacks of
 * PJRT_Client_Create, with node_id/num_nodes, as jax.distributed.initialize hands its store to
 * the CUDA and TPU plugins). The process-group layer offers its store here while a group
 * exists; the PJRT backend takes it when it creates a client. The functions return EM_OK, or
 * the status with a message in err[0..err_n). get's *val is malloc'd (the caller frees it).
 */
typedef struct em_group_kv {
    void *user;
    int node_id, num_nodes;
    em_status (*get)(void *user, const char *key, double timeout_s, void **val, size_t *n,
                     char *err, size_t err_n);
    em_status (*put)(void *user, const char *key, const void *val, size_t n, char *err,
                     size_t err_n);
} em_group_kv;
/* Offers kv (copied); NULL withdraws whatever is offered. */
void em_group_kv_offer(const em_group_kv *kv);
/* Withdraws the store of `user` if it is the one offered. */
void em_group_kv_withdraw(void *user);
/* The store on offer into *out; false when none. */
bool em_group_kv_current(em_group_kv *out);

#endif
