/*
 * device_map with Accelerate's meaning: one device for everything, "auto" (fill the open
 * accelerators in order of free memory, then the CPU), or an explicit map from module prefixes
 * to devices that must cover every module.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/model_impl.h"

typedef struct module {
    char name[160];
    em_device **slot;
    int64_t bytes;
} module;

/* Does map key `key` ("model.layers.0-13", "model.layers.3", "lm_head") cover `name`? */
static bool covers(const char *key, const char *name) {
    const char *dash = strrchr(key, '-');
    const char *dot = strrchr(key, '.');
    if (dash && dot && dash > dot) { /* a layer range a-b after the last dot */
        size_t plen = (size_t)(dot - key) + 1;
        if (strncmp(key, name, plen)) return false;
        char *end;
        long a = strtol(dot + 1, &end, 10);
        if (end != dash) return false;
        long b = strtol(dash + 1, &end, 10);
        if (*end) return false;
        long i = strtol(name + plen, &end, 10);
        if (end == name + plen || (*end && *end != '.')) return false;
        return i >= a && i <= b;
    }
    size_t n = strlen(key);
    return !strncmp(key, name, n) && (name[n] == 0 || name[n] == '.');
}

typedef struct parsed_map {
    char *copy;
    char *keys[256];
    em_device *devs[256];
    int n;
} parsed_map;

static em_status parse_map(em_ctx *c, const char *map, parsed_map *pm) {
    memset(pm, 0, sizeof *pm);
    pm->copy = strdup(map);
    if (!pm->copy) return em_ctx_fail(c, EM_ERR_OOM, "device_map", "out of memory");
    for (char *save = NULL, *tok = strtok_r(pm->copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok || !eq[1])
            return em_ctx_fail(c, EM_ERR_INVALID_ARG, "device_map",
                               "entry '%s' is not 'module=device'", tok);
        if (pm->n == 256)
            return em_ctx_fail(c, EM_ERR_INVALID_ARG, "device_map", "more than 256 entries");
        *eq = 0;
        pm->keys[pm->n] = tok;
        pm->devs[pm->n] = em_device_get(c, eq + 1);
        if (!pm->devs[pm->n]) return em_ctx_status(c);
        pm->n++;
    }
    return EM_OK;
}

/* The device of the longest key covering `name`, or NULL. */
static em_device *map_lookup(const parsed_map *pm, const char *name) {
    em_device *d = NULL;
    size_t best = 0;
    for (int k = 0; k < pm->n; k++)
        if (covers(pm->keys[k], name) && strlen(pm->keys[k]) >= best) {
            d = pm->devs[k];
            best = strlen(pm->keys[k]);
        }
    return d;
}

static em_status place_explicit(em_ctx *c, module *mods, int n, const char *map, bool causal,
                                em_device **head) {
    parsed_map pm;
    em_status s = parse_map(c, map, &pm);
    for (int i = 0; !s && i < n; i++) {
        *mods[i].slot = map_lookup(&pm, mods[i].name);
        if (!*mods[i].slot)
            s = em_ctx_fail(c, EM_ERR_INVALID_ARG, "device_map",
                            "the map does not cover module '%s' (every weight needs a device)",
                            mods[i].name);
    }
    if (!s && causal) { /* lm_head runs where the final norm is; a map may say so explicitly */
        em_device *lm = map_lookup(&pm, "lm_head");
        if (lm && lm != *head)
            s = em_ctx_fail(c, EM_ERR_UNSUPPORTED, "device_map",
                            "lm_head must be on the final norm's device (%s), not %s",
                            em_device_name(*head), em_device_name(lm));
    }
    free(pm.copy);
    return s;
}

static em_status place_auto(em_ctx *c, module *mods, int n) {
    /* the open non-CPU devices by free memory, then the CPU */
    em_device *order[64];
    int64_t room[64];
    int nd = 0;
    for (int i = 0; i < em_device_count() && nd < 63; i++) {
        em_device *d = em_device_at(i);
        em_device_info inf;
        if (d == em_device_cpu() || em_device_info_get(d, &inf) != EM_OK) continue;
        order[nd] = d;
        room[nd++] = inf.memory_free > 0 ? inf.memory_free * 9 / 10 : inf.memory_bytes * 9 / 10;
    }
    for (int i = 0; i < nd; i++)
        for (int j = i + 1; j < nd; j++)
            if (room[j] > room[i]) {
                em_device *t = order[i];
                order[i] = order[j];
                order[j] = t;
                int64_t r = room[i];
                room[i] = room[j];
                room[j] = r;
            }
    order[nd] = em_device_cpu();
    room[nd++] = INT64_MAX;
    int d = 0;
    for (int i = 0; i < n; i++) {
        while (d < nd - 1 && mods[i].bytes > room[d]) d++;
        *mods[i].slot = order[d];
        room[d] -= mods[i].bytes;
    }
    (void)c;
    return EM_OK;
}

em_status em_model_place(em_ctx *c, em_model *m, const em_model_options *o, em_wload *w) {
    const char *prefix = w->prefix;
    int n = 0;
    module *mods = calloc((size_t)m->n_layers + 3, sizeof *mods);
    if (!mods) return em_ctx_fail(c, EM_ERR_OOM, "device_map", "out of memory");
    bool causal = m->fam->causal;
    snprintf(mods[n].name, sizeof mods[n].name, "%s%s", prefix,
             causal ? "embed_tokens" : "embeddings");
    mods[n++].slot = &m->dev_embed;
    for (int64_t i = 0; i < m->n_layers; i++) {
        snprintf(mods[n].name, sizeof mods[n].name, "%s%s.%lld", prefix,
                 causal ? "layers" : "encoder.layer", (long long)i);
        mods[n++].slot = &m->layers[i].dev;
    }
    if (causal) {
        snprintf(mods[n].name, sizeof mods[n].name, "%snorm", prefix);
        mods[n++].slot = &m->dev_head;
        /* lm_head follows the final norm's device unless the map names it */
    }
    for (int i = 0; i < n; i++) mods[i].bytes = em_wl_bytes(w, mods[i].name);
    em_status s = EM_OK;
    if (o->device_map && !strcmp(o->device_map, "auto")) {
        s = place_auto(c, mods, n);
    } else if (o->device_map && *o->device_map) {
        s = place_explicit(c, mods, n, o->device_map, causal, &m->dev_head);
    } else {
        em_device *d = o->device ? em_device_get(c, o->device) : em_ctx_device(c);
        if (!d) s = em_ctx_status(c);
        for (int i = 0; !s && i < n; i++) *mods[i].slot = d;
    }
    if (!s) {
        size_t cap = (size_t)n * 200 + 64, u = 0;
        m->map_text = malloc(cap);
        for (int i = 0; m->map_text && i < n; i++)
            u += (size_t)snprintf(m->map_text + u, cap - u, "%s=%s\n", mods[i].name,
                                  em_device_name(*mods[i].slot));
        if (causal && m->map_text)
            snprintf(m->map_text + u, cap - u, "lm_head=%s\n", em_device_name(m->dev_head));
    }
    free(mods);
    return s;
}
