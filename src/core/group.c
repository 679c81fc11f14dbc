/* The registry of process groups and the key-value store on offer (core/group.h): a small
 * table under a lock, because groups are made and freed by whatever thread the caller likes
 * while kernels and the PJRT backend look them up. */
#include <pthread.h>

#include "core/group.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static em_group_info groups[EM_GROUP_MAX];
static bool used[EM_GROUP_MAX];
static em_group_kv kv_offered;
static bool kv_on;

int em_group_register(const em_group_info *g) {
    int id = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < EM_GROUP_MAX; i++)
        if (!used[i]) {
            used[i] = true;
            groups[i] = *g;
            id = i + 1;
            break;
        }
    pthread_mutex_unlock(&lock);
    return id;
}

void em_group_unregister(int id) {
    if (id < 1 || id > EM_GROUP_MAX) return;
    pthread_mutex_lock(&lock);
    used[id - 1] = false;
    pthread_mutex_unlock(&lock);
}

bool em_group_lookup(int id, em_group_info *out) {
    if (id < 1 || id > EM_GROUP_MAX) return false;
    pthread_mutex_lock(&lock);
    bool ok = used[id - 1];
    if (ok) *out = groups[id - 1];
    pthread_mutex_unlock(&lock);
    return ok;
}

void em_group_kv_offer(const em_group_kv *kv) {
    pthread_mutex_lock(&lock);
    kv_on = kv != NULL;
    if (kv) kv_offered = *kv;
    pthread_mutex_unlock(&lock);
}

void em_group_kv_withdraw(void *user) {
    pthread_mutex_lock(&lock);
    if (kv_on && kv_offered.user == user) kv_on = false;
    pthread_mutex_unlock(&lock);
}

bool em_group_kv_current(em_group_kv *out) {
    pthread_mutex_lock(&lock);
    bool on = kv_on;
    if (on) *out = kv_offered;
    pthread_mutex_unlock(&lock);
    return on;
}
