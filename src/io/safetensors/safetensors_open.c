/* Opening checkpoints: file mapping, sharded checkpoints through their index.json, the name
 * index, queries, and closing. Header parsing is in safetensors_parse.c. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/name_index.h"
#include "io/safetensors/safetensors_impl.h"

#define OP "safetensors_open"

/* ---- file images ---- */

void em_st_image_retain(em_st_image *im) {
    atomic_fetch_add_explicit(&im->refcount, 1, memory_order_relaxed);
}

void em_st_image_release(em_st_image *im) {
    if (!im || atomic_fetch_sub_explicit(&im->refcount, 1, memory_order_acq_rel) != 1) return;
    if (im->kind == EM_ST_IMAGE_MMAP) munmap(im->base, im->len);
    free(im);
}

void em_st_image_release_cb(void *im) { em_st_image_release(im); }

em_st_image *em_st_image_new(em_st_image_kind kind, uint8_t *base, size_t len) {
    em_st_image *im = malloc(sizeof *im);
    if (!im) return NULL;
    atomic_init(&im->refcount, 1);
    im->kind = kind;
    im->base = base;
    im->len = len;
    return im;
}

/* Maps a whole file. Private and writable: tensors pointing into it may be written (the
 * writes stay in memory, copy-on-write) and the file can never be changed through them.
 * Pages are read when a tensor is first touched. */
em_st_image *em_st_image_map(em_ctx *c, const char *path, const char *op) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        EM_FAIL(c, errno == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO, op, "cannot open %s: %s", path,
                strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int err = errno;
        close(fd);
        EM_FAIL(c, EM_ERR_IO, op, "cannot read %s: %s", path,
                S_ISDIR(sb.st_mode) ? "it is a directory" : strerror(err));
        return NULL;
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        EM_FAIL(c, EM_ERR_OVERFLOW, op, "%s: %lld bytes do not fit this address space", path,
                (long long)sb.st_size);
        return NULL;
    }
    size_t len = (size_t)sb.st_size;
    em_st_image *im;
    if (len == 0) {
        im = em_st_image_new(EM_ST_IMAGE_EMPTY, NULL, 0);
    } else {
        /* NORESERVE: under the default overcommit heuristic a private writable mapping of a
         * checkpoint larger than RAM would otherwise be refused; where it still is (strict
         * overcommit), the mapping is read-only and writing into a zero-copy tensor faults. */
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
        if (p == MAP_FAILED && errno == ENOMEM)
            p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            EM_FAIL(c, EM_ERR_IO, op, "cannot map %s (%zu bytes): %s", path, len, strerror(err));
            return NULL;
        }
        im = em_st_image_new(EM_ST_IMAGE_MMAP, p, len);
        if (!im) munmap(p, len);
    }
    close(fd);
    if (!im) EM_FAIL(c, EM_ERR_OOM, op, "out of memory opening %s", path);
    return im;
}

/* ---- handle ---- */

em_safetensors *em_st_new(const char *path) {
    em_safetensors *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->path = strdup(path ? path : "");
    if (!st->path) {
        free(st);
        return NULL;
    }
    return st;
}

void em_safetensors_free(em_safetensors *st) {
    if (!st) return;
    for (int64_t i = 0; i < st->n_entries; i++) {
        free((char *)st->entries[i].info.name);
        free((int64_t *)st->entries[i].info.shape);
    }
    free(st->entries);
    free(st->by_name);
    for (int i = 0; i < st->n_files; i++) {
        free(st->files[i].path);
        em_st_image_release(st->files[i].image);
    }
    free(st->files);
    for (int i = 0; i < st->n_meta; i++) {
        free(st->meta_keys[i]);
        free(st->meta_values[i]);
    }
    free(st->meta_keys);
    free(st->meta_values);
    free(st->path);
    free(st);
}

typedef struct name_ref {
    const char *name;
    int64_t idx;
} name_ref;

static int cmp_name_ref(const void *a, const void *b) {
    const name_ref *x = a, *y = b;
    int r = strcmp(x->name, y->name);
    return r ? r : (x->idx < y->idx ? -1 : x->idx > y->idx);
}

em_status em_st_finish(em_ctx *c, em_safetensors *st, em_st_choose_fn choose, void *user) {
    int64_t n = st->n_entries;
    name_ref *refs = malloc((size_t)(n ? n : 1) * sizeof *refs);
    if (!refs) return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory indexing %lld tensors", (long long)n);
    for (int64_t i = 0; i < n; i++) refs[i] = (name_ref){st->entries[i].info.name, i};
    qsort(refs, (size_t)n, sizeof *refs, cmp_name_ref);
    /* A name held by several shards: the one the index names wins, otherwise it is ambiguous. */
    for (int64_t i = 0; i + 1 < n; i++) {
        if (strcmp(refs[i].name, refs[i + 1].name)) continue;
        int64_t j = i;
        while (j + 1 < n && !strcmp(refs[j + 1].name, refs[i].name)) j++;
        int want = choose ? choose(user, refs[i].name) : -1;
        int64_t keep = -1;
        for (int64_t k = i; k <= j; k++)
            if (st->entries[refs[k].idx].file == want) keep = refs[k].idx;
        if (keep < 0) {
            em_status s = EM_FAIL(c, EM_ERR_FORMAT, OP,
                                  "%s: tensor \"%s\" is in both %s and %s, and no index says "
                                  "which to use",
                                  st->path, refs[i].name,
                                  st->files[st->entries[refs[i].idx].file].path,
                                  st->files[st->entries[refs[i + 1].idx].file].path);
            free(refs);
            return s;
        }
        for (int64_t k = i; k <= j; k++)
            if (refs[k].idx != keep) st->entries[refs[k].idx].dropped = true;
        i = j;
    }
    /* Compact away dropped duplicates, keeping file-then-offset order. */
    int64_t w = 0;
    for (int64_t i = 0; i < n; i++) {
        if (st->entries[i].dropped) {
            free((char *)st->entries[i].info.name);
            free((int64_t *)st->entries[i].info.shape);
            continue;
        }
        st->entries[w++] = st->entries[i];
    }
    st->n_entries = w;
    free(st->by_name);
    st->by_name = malloc((size_t)(w ? w : 1) * sizeof *st->by_name);
    if (!st->by_name) {
        free(refs);
        return EM_FAIL(c, EM_ERR_OOM, OP, "out of memory indexing %lld tensors", (long long)w);
    }
    for (int64_t i = 0; i < w; i++) refs[i] = (name_ref){st->entries[i].info.name, i};
    qsort(refs, (size_t)w, sizeof *refs, cmp_name_ref);
    for (int64_t i = 0; i < w; i++) st->by_name[i] = refs[i].idx;
    free(refs);
    return EM_OK;
}

/* Index of the first name >= `name` in by_name order. */
static const char *sorted_name(const void *ctx, int64_t k) {
    const em_safetensors *st = ctx;
    return st->entries[st->by_name[k]].info.name;
}

static int64_t lower_bound(const em_safetensors *st, const char *name) {
    return em_names_lower_bound(sorted_name, st, st->n_entries, name);
}

const em_safetensors_info *em_safetensors_find(const em_safetensors *st, const char *name) {
    if (!st || !name || !st->by_name) return NULL;
    int64_t i = lower_bound(st, name);
    if (i < st->n_entries && !strcmp(st->entries[st->by_name[i]].info.name, name))
        return &st->entries[st->by_name[i]].info;
    return NULL;
}

const char *em_st_nearest_name(const em_safetensors *st, const char *name) {
    if (!st || !st->n_entries || !st->by_name) return NULL;
    return em_names_nearest(sorted_name, st, st->n_entries, name);
}

bool em_safetensors_has(const em_safetensors *st, const char *name) {
    return em_safetensors_find(st, name) != NULL;
}

int64_t em_safetensors_count(const em_safetensors *st) { return st ? st->n_entries : 0; }

const em_safetensors_info *em_safetensors_info_at(const em_safetensors *st, int64_t i) {
    return st && i >= 0 && i < st->n_entries ? &st->entries[i].info : NULL;
}

int em_safetensors_file_count(const em_safetensors *st) { return st ? st->n_files : 0; }

const char *em_safetensors_file_path(const em_safetensors *st, int i) {
    return st && i >= 0 && i < st->n_files ? st->files[i].path : NULL;
}

int em_safetensors_metadata_count(const em_safetensors *st) { return st ? st->n_meta : 0; }

const char *em_safetensors_metadata_key(const em_safetensors *st, int i) {
    return st && i >= 0 && i < st->n_meta ? st->meta_keys[i] : NULL;
}

const char *em_safetensors_metadata_value(const em_safetensors *st, int i) {
    return st && i >= 0 && i < st->n_meta ? st->meta_values[i] : NULL;
}

const char *em_safetensors_metadata_get(const em_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    for (int i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta_keys[i], key)) return st->meta_values[i];
    return NULL;
}

/* ---- opening ---- */

static em_safetensors *open_single(em_ctx *c, const char *path) {
    em_safetensors *st = em_st_new(path);
    if (!st) {
        EM_FAIL(c, EM_ERR_OOM, OP, "out of memory opening %s", path);
        return NULL;
    }
    em_st_image *im = em_st_image_map(c, path, OP);
    if (!im || em_st_add_file(c, st, path, im) || em_st_finish(c, st, NULL, NULL)) {
        em_safetensors_free(st);
        return NULL;
    }
    return st;
}

em_safetensors *em_safetensors_open_memory(em_ctx *c, const void *data, size_t n,
                                           const char *name) {
    if (!c || c->err.status) return NULL;
    if (!data && n) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "data is NULL");
        return NULL;
    }
    if (!name) name = "<memory>";
    em_safetensors *st = em_st_new(name);
    em_st_image *im = em_st_image_new(EM_ST_IMAGE_BORROWED, (uint8_t *)data, n);
    if (!st || !im) {
        free(im);
        em_safetensors_free(st);
        EM_FAIL(c, EM_ERR_OOM, OP, "out of memory opening %s", name);
        return NULL;
    }
    if (em_st_add_file(c, st, name, im) || em_st_finish(c, st, NULL, NULL)) {
        em_safetensors_free(st);
        return NULL;
    }
    return st;
}

/* ---- sharded checkpoints ---- */

typedef struct shard_map {
    json_t *weight_map;
    char **names; /* distinct shard file names, sorted */
    int n;
} shard_map;

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int choose_shard(void *user, const char *name) {
    shard_map *m = user;
    json_t *v = json_object_get(m->weight_map, name);
    if (!json_is_string(v)) return -1;
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->names[i], json_string_value(v))) return i;
    return -1;
}

/* Shard names come from a file: keep them inside the checkpoint directory. */
static bool safe_relative(const char *s) {
    if (!*s || s[0] == '/') return false;
    for (const char *p = s; *p;) {
        const char *q = strchr(p, '/');
        size_t l = q ? (size_t)(q - p) : strlen(p);
        if (l == 2 && p[0] == '.' && p[1] == '.') return false;
        if (!q) break;
        p = q + 1;
    }
    return true;
}

static em_safetensors *open_index(em_ctx *c, const char *path) {
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (access(path, F_OK) != 0)
            EM_FAIL(c, EM_ERR_NOT_FOUND, OP, "cannot open %s: %s", path, strerror(errno));
        else
            EM_FAIL(c, EM_ERR_FORMAT, OP, "%s is not valid JSON: %s (line %d, column %d)", path,
                    jerr.text, jerr.line, jerr.column);
        return NULL;
    }
    em_safetensors *st = NULL;
    shard_map m = {0};
    char *dir = NULL;
    json_t *wm = json_object_get(root, "weight_map");
    if (!json_is_object(root) || !json_is_object(wm)) {
        EM_FAIL(c, EM_ERR_FORMAT, OP, "%s: no \"weight_map\" object (not a safetensors index?)",
                path);
        goto done;
    }
    m.weight_map = wm;
    m.names = malloc((json_object_size(wm) + 1) * sizeof *m.names);
    if (!m.names) {
        EM_FAIL(c, EM_ERR_OOM, OP, "out of memory reading %s", path);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v)) {
            EM_FAIL(c, EM_ERR_FORMAT, OP,
                    "%s: weight_map[\"%s\"] is not a string naming a shard file", path, key);
            goto done;
        }
        if (!safe_relative(json_string_value(v))) {
            EM_FAIL(c, EM_ERR_FORMAT, OP,
                    "%s: weight_map[\"%s\"] = \"%s\" is not a file name inside the checkpoint "
                    "directory",
                    path, key, json_string_value(v));
            goto done;
        }
        m.names[m.n++] = (char *)json_string_value(v);
    }
    /* transformers loads sorted(set(weight_map.values())) */
    qsort(m.names, (size_t)m.n, sizeof *m.names, cmp_str);
    int u = 0;
    for (int i = 0; i < m.n; i++)
        if (!u || strcmp(m.names[u - 1], m.names[i])) m.names[u++] = m.names[i];
    m.n = u;

    dir = strdup(path);
    st = em_st_new(path);
    if (!dir || !st) {
        EM_FAIL(c, EM_ERR_OOM, OP, "out of memory reading %s", path);
        goto done;
    }
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = 0;
    else
        dir[0] = 0;
    for (int i = 0; i < m.n; i++) {
        size_t need = strlen(dir) + strlen(m.names[i]) + 1;
        char *sp = malloc(need);
        if (!sp) {
            EM_FAIL(c, EM_ERR_OOM, OP, "out of memory reading %s", path);
            goto fail;
        }
        snprintf(sp, need, "%s%s", dir, m.names[i]);
        em_st_image *im = em_st_image_map(c, sp, OP);
        if (!im) {
            /* Say which weights the missing shard was meant to hold. */
            int count = 0;
            const char *example = "";
            json_object_foreach(wm, key, v) if (!strcmp(json_string_value(v), m.names[i])) {
                if (!count++) example = key;
            }
            em_error *e = &c->err;
            char prev[sizeof e->detail];
            snprintf(prev, sizeof prev, "%s", e->detail);
            em_status s = e->status;
            em_ctx_clear_error(c);
            EM_FAIL(c, s, OP, "shard %s listed in %s for %d weights (e.g. \"%s\"): %s",
                    m.names[i], path, count, example, prev);
            free(sp);
            goto fail;
        }
        em_status s = em_st_add_file(c, st, sp, im);
        free(sp);
        if (s) goto fail;
    }
    if (em_st_finish(c, st, choose_shard, &m)) goto fail;
    /* Every weight the index lists must be in the shard it names. */
    json_object_foreach(wm, key, v) {
        const em_safetensors_info *ti = em_safetensors_find(st, key);
        int want = choose_shard(&m, key);
        if (!ti || strcmp(ti->file, st->files[want].path)) {
            EM_FAIL(c, EM_ERR_NOT_FOUND, OP,
                    "%s: weight \"%s\" is listed in the index under %s but that shard has no "
                    "such tensor%s%s",
                    path, key, m.names[want], ti ? "; it is in " : "", ti ? ti->file : "");
            goto fail;
        }
    }
    goto done;
fail:
    em_safetensors_free(st);
    st = NULL;
done:
    free(dir);
    free(m.names);
    json_decref(root);
    return st;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

em_safetensors *em_safetensors_open(em_ctx *c, const char *path) {
    if (!c || c->err.status) return NULL;
    if (!path || !*path) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "path is NULL or empty");
        return NULL;
    }
    if (is_dir(path)) {
        size_t n = strlen(path) + 64;
        char *idx = malloc(n), *single = malloc(n);
        if (!idx || !single) {
            free(idx);
            free(single);
            EM_FAIL(c, EM_ERR_OOM, OP, "out of memory");
            return NULL;
        }
        const char *sep = ends_with(path, "/") ? "" : "/";
        snprintf(idx, n, "%s%smodel.safetensors.index.json", path, sep);
        snprintf(single, n, "%s%smodel.safetensors", path, sep);
        em_safetensors *st = NULL;
        if (is_file(idx))
            st = open_index(c, idx);
        else if (is_file(single))
            st = open_single(c, single);
        else
            EM_FAIL(c, EM_ERR_NOT_FOUND, OP,
                    "%s holds neither model.safetensors.index.json nor model.safetensors", path);
        free(idx);
        free(single);
        return st;
    }
    if (ends_with(path, ".json")) return open_index(c, path);
    return open_single(c, path);
}
