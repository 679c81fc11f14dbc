/* Chat templates: the failure record, the arena every compile and render allocates from, and
 * growable byte buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/jinja/jinja.h"

jinja_limits jinja_default_limits(void) {
    jinja_limits l = {
        .max_source = (size_t)16 << 20,
        .max_output = (size_t)64 << 20,
        .max_memory = (size_t)512 << 20,
        .max_steps = 50u * 1000 * 1000,
        .max_depth = 1000,
        .max_parse_depth = 150,
        .max_height = 1000,
        .max_macro_depth = 100,
    };
    return l;
}

void jmem_linecol(const char *src, size_t len, uint32_t pos, int *line, int *col) {
    int l = 1, c = 1;
    for (size_t i = 0; src && i < len && i < pos; i++) {
        if (src[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)src[i] & 0xC0) != 0x80) {
            c++; /* columns count characters, not UTF-8 bytes */
        }
    }
    *line = l;
    *col = c;
}

_Noreturn void jmem_fail_at(jfail *f, em_status s, uint32_t pos, const char *fmt, ...) {
    f->status = s;
    size_t used = 0;
    if (pos != JPOS_NONE && f->src) {
        int line, col;
        jmem_linecol(f->src, f->src_len, pos, &line, &col);
        int k = snprintf(f->msg, sizeof f->msg, "line %d, column %d: ", line, col);
        used = k > 0 ? (size_t)k : 0;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg + used, sizeof f->msg - used, fmt, ap);
    va_end(ap);
    longjmp(f->jb, 1);
}

/* ---- arena ---- */

struct jchunk {
    jchunk *next;
    size_t size;
    _Alignas(16) char data[];
};

enum { JA_CHUNK = 64 * 1024 };

void jmem_init(jarena *a, jfail *f, size_t limit) {
    memset(a, 0, sizeof *a);
    a->fail = f;
    a->limit = limit;
}

void jmem_free(jarena *a) {
    jchunk *c = a->head;
    while (c) {
        jchunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->cur = a->end = NULL;
    a->total = 0;
}

static jchunk *jmem_chunk(jarena *a, size_t size) {
    if (size > SIZE_MAX / 2 || (a->limit && a->total + size > a->limit))
        jmem_fail_at(a->fail, EM_ERR_OVERFLOW, JPOS_NONE,
                 "the template needs more than %zu MiB of working memory (limit)",
                 a->limit >> 20);
    jchunk *c = malloc(sizeof *c + size);
    if (!c) jmem_fail_at(a->fail, EM_ERR_OOM, JPOS_NONE, "out of memory (%zu bytes)", size);
    c->size = size;
    a->total += size;
    return c;
}

void *jmem_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if ((size_t)(a->end - a->cur) >= n && a->cur) {
        void *p = a->cur;
        a->cur += n;
        return p;
    }
    if (n > JA_CHUNK / 4) {
        /* big blocks get their own chunk, kept behind the current one */
        jchunk *c = jmem_chunk(a, n);
        if (a->head) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = NULL;
            a->head = c;
            a->cur = a->end = c->data + n;
        }
        return c->data;
    }
    jchunk *c = jmem_chunk(a, JA_CHUNK);
    c->next = a->head;
    a->head = c;
    a->cur = c->data + n;
    a->end = c->data + JA_CHUNK;
    return c->data;
}

void *jmem_zalloc(jarena *a, size_t n) {
    void *p = jmem_alloc(a, n);
    memset(p, 0, n);
    return p;
}

void *jmem_grow(jarena *a, void *p, size_t old, size_t n) {
    if (n <= old) return p;
    void *q = jmem_alloc(a, n);
    if (old) memcpy(q, p, old);
    return q;
}

char *jmem_strndup(jarena *a, const char *s, size_t n) {
    char *p = jmem_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---- buffers ---- */

void jmem_buf_init(jbuf *b, jarena *a, size_t limit) {
    b->p = NULL;
    b->n = b->cap = 0;
    b->limit = limit;
    b->a = a;
}

static void jmem_reserve(jbuf *b, size_t extra) {
    if (b->limit && b->n + extra > b->limit)
        jmem_fail_at(b->a->fail, EM_ERR_OVERFLOW, JPOS_NONE,
                 "the rendered text exceeds %zu bytes (limit)", b->limit);
    if (b->n + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) {
        if (cap > SIZE_MAX / 4)
            jmem_fail_at(b->a->fail, EM_ERR_OVERFLOW, JPOS_NONE, "string too large");
        cap *= 2;
    }
    b->p = jmem_grow(b->a, b->p, b->n, cap);
    b->cap = cap;
}

void jmem_put(jbuf *b, const char *s, size_t n) {
    if (!n) return;
    jmem_reserve(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jmem_puts(jbuf *b, const char *s) { jmem_put(b, s, strlen(s)); }

void jmem_putc(jbuf *b, char c) { jmem_put(b, &c, 1); }

void jmem_printf(jbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) {
        jmem_put(b, tmp, (size_t)k);
        return;
    }
    jmem_reserve(b, (size_t)k);
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

void jmem_put_cp(jbuf *b, uint32_t cp) {
    char t[4];
    size_t n;
    if (cp < 0x80) {
        t[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        t[0] = (char)(0xC0 | (cp >> 6));
        t[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12));
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        t[0] = (char)(0xF0 | (cp >> 18));
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    jmem_put(b, t, n);
}
