/*
 * Process groups as the op table sees them: a collective op (all_reduce, ...) carries its group
 * as an integer attribute, an id in this registry, so its shape rule can ask the group's size and
 * a backend's kernel how to reach the other members. The registry is filled by the process-group
 * layer (src/dist/) when a group is made and emptied when it is freed; core names no transport.
 */
#ifndef EMBER_CORE_GROUP_H
#define EMBER_CORE_GROUP_H

#include <stdbool.h>

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

#endif
