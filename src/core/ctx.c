/* The context: first-error record, scopes, defaults. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernel_registry.h"
#include "core/tensor_impl.h"

static const char *const status_names[EM_STATUS_COUNT] = {
    [EM_OK] = "ok",
    [EM_ERR_INVALID_ARG] = "invalid argument",
    [EM_ERR_SHAPE] = "shape error",
    [EM_ERR_DTYPE] = "dtype error",
    [EM_ERR_DEVICE] = "device error",
    [EM_ERR_INDEX] = "index out of range",
    [EM_ERR_OOM] = "out of memory",
    [EM_ERR_OVERFLOW] = "size overflow",
    [EM_ERR_IO] = "I/O error",
    [EM_ERR_FORMAT] = "format error",
    [EM_ERR_UNSUPPORTED] = "unsupported",
    [EM_ERR_INTERNAL] = "internal error",
    [EM_ERR_BACKEND] = "backend error",
    [EM_ERR_NOT_FOUND] = "not found",
};
_Static_assert(EM_STATUS_COUNT == 14, "update status_names");

const char *em_status_str(em_status s) {
    return (unsigned)s < EM_STATUS_COUNT && status_names[s] ? status_names[s] : "unknown status";
}

const char *em_version(void) { return "0.1.0"; }

void em_free(void *p) { free(p); }

em_ctx *em_ctx_create(void) {
    em_ctx *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->scope_cap = 8;
    c->scopes = calloc((size_t)c->scope_cap, sizeof *c->scopes);
    if (!c->scopes) {
        free(c);
        return NULL;
    }
    c->mode = EM_EAGER_ASYNC;
    const char *m = getenv("EMBER_EAGER");
    if (m && *m) em_eager_mode_parse(m, &c->mode);
    c->device = em_device_host();
    /* the kernel packages of $EMBER_KERNELS join the registry before the first op runs */
    em_kreg_autoload();
    return c;
}

static void scope_clear(em_scope *s) {
    for (int i = s->len - 1; i >= 0; i--) em_tensor_release(s->items[i]);
    s->len = 0;
}

void em_ctx_free(em_ctx *c) {
    if (!c) return;
    if (c->tape_free) c->tape_free(c);
    for (int d = c->depth; d >= 0; d--) scope_clear(&c->scopes[d]);
    /* popped scopes keep their arrays for reuse: free every slot ever used */
    for (int d = 0; d < c->scope_cap; d++) free(c->scopes[d].items);
    free(c->scopes);
    free(c);
}

em_status em_ctx_status(const em_ctx *c) { return c ? c->err.status : EM_ERR_INVALID_ARG; }

const em_error *em_ctx_error(const em_ctx *c) {
    return c && c->err.status != EM_OK ? &c->err : NULL;
}

void em_ctx_clear_error(em_ctx *c) {
    if (c) memset(&c->err, 0, sizeof c->err);
}

/* Writes the error record; the caller has checked that none is recorded yet. */
static void record(em_ctx *c, em_status s, const char *op, const char *dev, const char *file,
                   int line, const char *sig, const char *fmt, va_list ap) {
    em_error *e = &c->err;
    e->status = s;
    snprintf(e->op, sizeof e->op, "%s", op ? op : "");
    snprintf(e->device, sizeof e->device, "%s", dev ? dev : "");
    vsnprintf(e->detail, sizeof e->detail, fmt, ap);
    e->file = file;
    e->line = line;
    char where[256] = "";
    if (file) snprintf(where, sizeof where, " at %s:%d", file, line);
    char ctxs[320] = "";
    if (sig && *sig && dev && *dev)
        snprintf(ctxs, sizeof ctxs, " (inputs %s; device %s)", sig, dev);
    else if (sig && *sig)
        snprintf(ctxs, sizeof ctxs, " (inputs %s)", sig);
    else if (dev && *dev)
        snprintf(ctxs, sizeof ctxs, " (device %s)", dev);
    snprintf(e->message, sizeof e->message, "%s: %s%s%s%s%s", em_status_str(s), e->op,
             *e->op ? ": " : "", e->detail, ctxs, where);
}

em_status em_fail_at(em_ctx *c, em_status s, const char *op, const char *file, int line,
                     const char *fmt, ...) {
    if (!c || c->err.status != EM_OK) return s;
    va_list ap;
    va_start(ap, fmt);
    record(c, s, op, NULL, file, line, NULL, fmt, ap);
    va_end(ap);
    return s;
}

em_status em_ctx_fail(em_ctx *c, em_status s, const char *op, const char *fmt, ...) {
    if (!c || c->err.status != EM_OK) return s;
    va_list ap;
    va_start(ap, fmt);
    record(c, s, op, NULL, NULL, 0, NULL, fmt, ap);
    va_end(ap);
    return s;
}

em_status em_op_fail(em_ctx *c, em_status s, const char *fmt, ...) {
    if (!c || c->err.status != EM_OK) return s;
    char sig[256] = "";
    size_t used = 0;
    for (int i = 0; i < c->cur.n_in && used + 2 < sizeof sig; i++) {
        char one[96];
        if (c->cur.in[i])
            em_tensor_sig(c->cur.in[i], one, sizeof one);
        else
            snprintf(one, sizeof one, "none");
        int k = snprintf(sig + used, sizeof sig - used, "%s%s", i ? ", " : "", one);
        if (k < 0) break;
        used += (size_t)k;
    }
    va_list ap;
    va_start(ap, fmt);
    record(c, s, c->cur.op, c->cur.dev ? c->cur.dev->name : NULL, c->cur.file, c->cur.line, sig,
           fmt, ap);
    va_end(ap);
    return s;
}

bool em_eager_mode_parse(const char *s, em_eager_mode *out) {
    if (!s) return false;
    if (!strcmp(s, "sync")) *out = EM_EAGER_SYNC;
    else if (!strcmp(s, "async")) *out = EM_EAGER_ASYNC;
    else if (!strcmp(s, "fused")) *out = EM_EAGER_FUSED;
    else return false;
    return true;
}

const char *em_eager_mode_name(em_eager_mode m) {
    switch (m) {
    case EM_EAGER_SYNC: return "sync";
    case EM_EAGER_ASYNC: return "async";
    case EM_EAGER_FUSED: return "fused";
    }
    return "?";
}

void em_ctx_set_eager_mode(em_ctx *c, em_eager_mode m) {
    if (!c) return;
    /* Pending fused chains evaluate lazily when read, so switching needs no flush here: a lazy
     * tensor stays valid in every mode. */
    c->mode = m;
}

em_eager_mode em_ctx_eager_mode(const em_ctx *c) { return c ? c->mode : EM_EAGER_ASYNC; }

void em_ctx_set_device(em_ctx *c, em_device *d) {
    if (c && d) c->device = d;
}

em_device *em_ctx_device(const em_ctx *c) { return c ? c->device : NULL; }

/* ---- scopes ---- */

int em_scope_push(em_ctx *c) {
    if (!c) return -1;
    if (c->depth + 1 >= c->scope_cap) {
        int ncap = c->scope_cap * 2;
        em_scope *ns = realloc(c->scopes, (size_t)ncap * sizeof *ns);
        if (!ns) {
            EM_FAIL(c, EM_ERR_OOM, "scope_push", "cannot grow the scope stack to %d", ncap);
            return -1;
        }
        memset(ns + c->scope_cap, 0, (size_t)(ncap - c->scope_cap) * sizeof *ns);
        c->scopes = ns;
        c->scope_cap = ncap;
    }
    c->depth++;
    c->scopes[c->depth].len = 0;
    return c->depth;
}

void em_scope_pop(em_ctx *c) {
    if (!c || c->depth == 0) return;
    scope_clear(&c->scopes[c->depth]);
    c->depth--;
}

int em_scope_depth(const em_ctx *c) { return c ? c->depth : 0; }

static bool scope_append(em_ctx *c, em_scope *s, em_tensor *t) {
    if (s->len == s->cap) {
        int ncap = s->cap ? s->cap * 2 : 64;
        em_tensor **ni = realloc(s->items, (size_t)ncap * sizeof *ni);
        if (!ni) {
            EM_FAIL(c, EM_ERR_OOM, "scope", "cannot grow a scope to %d tensors", ncap);
            return false;
        }
        s->items = ni;
        s->cap = ncap;
    }
    s->items[s->len++] = t;
    return true;
}

em_tensor *em_scope_add(em_ctx *c, em_tensor *t) {
    if (!t) return NULL;
    if (!scope_append(c, &c->scopes[c->depth], t)) {
        em_tensor_release(t);
        return NULL;
    }
    return t;
}

em_tensor *em_adopt(em_ctx *c, em_tensor *t) {
    if (!c || !t) return t;
    return em_scope_add(c, t);
}

/* Removes t from scope s (searching from the newest entry); true if found. */
static bool scope_remove(em_scope *s, em_tensor *t) {
    for (int i = s->len - 1; i >= 0; i--)
        if (s->items[i] == t) {
            memmove(s->items + i, s->items + i + 1, (size_t)(s->len - i - 1) * sizeof *s->items);
            s->len--;
            return true;
        }
    return false;
}

em_tensor *em_keep(em_ctx *c, em_tensor *t) {
    if (!c || !t || c->depth == 0) return t;
    em_scope *cur = &c->scopes[c->depth], *parent = &c->scopes[c->depth - 1];
    if (!scope_remove(cur, t)) em_tensor_retain(t);
    if (!scope_append(c, parent, t)) {
        em_tensor_release(t);
        return NULL;
    }
    return t;
}

em_tensor *em_detach(em_ctx *c, em_tensor *t) {
    if (!c || !t) return t;
    for (int d = c->depth; d >= 0; d--)
        if (scope_remove(&c->scopes[d], t)) return t;
    return em_tensor_retain(t);
}
