/* The StableHLO text builder (see shlo.h). */
#include "backends/pjrt/shlo.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"

/* Attribute text is built in fixed buffers sized for EM_MAX_DIMS values of 20 digits; GCC cannot
 * see that bound and warns about truncation that cannot happen. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

static const char *elem_names[SH_ELEM_COUNT] = {"f32", "bf16", "f16", "f64", "i64", "i32",
                                                "i16", "i8",   "ui8", "i1",  "ui32", "ui64"};

sh_elem sh_elem_of(em_dtype t) {
    switch (t) {
    case EM_F32: return SH_F32;
    case EM_BF16: return SH_BF16;
    case EM_F16: return SH_F16;
    case EM_F64: return SH_F64;
    case EM_I64: return SH_I64;
    case EM_I32: return SH_I32;
    case EM_I16: return SH_I16;
    case EM_I8: return SH_I8;
    case EM_U8: return SH_U8;
    case EM_BOOL: return SH_I1;
    default: return SH_F32;
    }
}

const char *sh_elem_name(sh_elem e) { return (unsigned)e < SH_ELEM_COUNT ? elem_names[e] : "?"; }
bool sh_elem_is_float(sh_elem e) { return e <= SH_F64; }
bool sh_elem_is_int(sh_elem e) { return e >= SH_I64 && e != SH_I1; }
bool sh_elem_is_unsigned(sh_elem e) { return e == SH_U8 || e == SH_U32 || e == SH_U64; }

void sh_init(sh_b *b) { memset(b, 0, sizeof *b); }

void sh_free(sh_b *b) {
    free(b->body);
    free(b->funcs);
    b->body = b->funcs = NULL;
    b->len = b->cap = 0;
    b->n_funcs = 0;
}

int sh_add_func(sh_b *b, const char *text) {
    if (b->err[0]) return -1;
    size_t old = b->funcs ? strlen(b->funcs) : 0, n = strlen(text);
    char *p = realloc(b->funcs, old + n + 2);
    if (!p) {
        sh_fail(b, "out of memory");
        return -1;
    }
    memcpy(p + old, text, n);
    memcpy(p + old + n, "\n", 2);
    b->funcs = p;
    return b->n_funcs++;
}

const char *sh_funcs(const sh_b *b) { return b->funcs ? b->funcs : ""; }

sh_val sh_call(sh_b *b, const char *callee, const sh_val *ops, int n, sh_type rt) {
    char a[160];
    snprintf(a, sizeof a, "callee = @%s", callee);
    return sh_op(b, "func.call", ops, n, a, rt);
}

bool sh_ok(const sh_b *b) { return !b->err[0]; }

void sh_fail(sh_b *b, const char *fmt, ...) {
    if (b->err[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, sizeof b->err, fmt, ap);
    va_end(ap);
    if (!b->err[0]) snprintf(b->err, sizeof b->err, "emitter error");
}

static void put(sh_b *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sh_b *b, const char *fmt, ...) {
    if (b->err[0]) return;
    for (;;) {
        size_t room = b->cap - b->len;
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->body ? b->body + b->len : NULL, b->body ? room : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            sh_fail(b, "formatting failed");
            return;
        }
        if (b->body && (size_t)k < room) {
            b->len += (size_t)k;
            return;
        }
        size_t nc = b->cap ? b->cap * 2 : 4096;
        while (nc < b->len + (size_t)k + 1) nc *= 2;
        char *nb = realloc(b->body, nc);
        if (!nb) {
            sh_fail(b, "out of memory");
            return;
        }
        b->body = nb;
        b->cap = nc;
    }
}

sh_type sh_ty(sh_elem e, int nd, const int64_t *d) {
    sh_type t;
    memset(&t, 0, sizeof t);
    t.e = e;
    t.nd = nd;
    for (int i = 0; i < nd; i++) t.d[i] = d[i];
    return t;
}

sh_type sh_ty_with(sh_type t, sh_elem e) {
    t.e = e;
    return t;
}

sh_type sh_scalar_ty(sh_elem e) { return sh_ty(e, 0, NULL); }

int64_t sh_numel(const sh_type *t) {
    int64_t n = 1;
    for (int i = 0; i < t->nd; i++) n *= t->d[i];
    return n;
}

bool sh_same_shape(const sh_type *a, const sh_type *b) {
    if (a->nd != b->nd) return false;
    for (int i = 0; i < a->nd; i++)
        if (a->d[i] != b->d[i]) return false;
    return true;
}

static void put_type(sh_b *b, const sh_type *t) {
    put(b, "tensor<");
    for (int i = 0; i < t->nd; i++) put(b, "%" PRId64 "x", t->d[i]);
    put(b, "%s>", sh_elem_name(t->e));
}

static void put_val(sh_b *b, sh_val v) {
    if (v.sub >= 0)
        put(b, "%%v%d#%d", v.id, v.sub);
    else
        put(b, "%%v%d", v.id);
}

static sh_val bad(void) {
    sh_val v;
    memset(&v, 0, sizeof v);
    v.id = -1;
    v.sub = -1;
    return v;
}

static bool valid(sh_b *b, const sh_val *v, int n) {
    if (b->err[0]) return false;
    for (int i = 0; i < n; i++)
        if (v[i].id < 0) {
            sh_fail(b, "invalid operand");
            return false;
        }
    return true;
}

static sh_val fresh(sh_b *b, sh_type t) {
    sh_val v;
    v.id = b->next++;
    v.sub = -1;
    v.t = t;
    return v;
}

sh_val sh_param(sh_b *b, sh_type t) {
    if (b->n_params >= SH_MAX_PARAMS) {
        sh_fail(b, "more than %d parameters", SH_MAX_PARAMS);
        return bad();
    }
    b->params[b->n_params++] = t;
    sh_val v = fresh(b, t);
    return v;
}

/* Prints `(types) -> rt` for operands ops. */
static void put_sig(sh_b *b, const sh_val *ops, int n, const sh_type *rts, int nr) {
    put(b, " : (");
    for (int i = 0; i < n; i++) {
        if (i) put(b, ", ");
        put_type(b, &ops[i].t);
    }
    put(b, ") -> ");
    if (nr != 1) put(b, "(");
    for (int i = 0; i < nr; i++) {
        if (i) put(b, ", ");
        put_type(b, &rts[i]);
    }
    if (nr != 1) put(b, ")");
    put(b, "\n");
}

static void put_operands(sh_b *b, const sh_val *ops, int n) {
    put(b, "(");
    for (int i = 0; i < n; i++) {
        if (i) put(b, ", ");
        put_val(b, ops[i]);
    }
    put(b, ")");
}

sh_val sh_op(sh_b *b, const char *name, const sh_val *ops, int n, const char *attrs, sh_type rt) {
    if (!valid(b, ops, n)) return bad();
    sh_val r = fresh(b, rt);
    put(b, "    ");
    put_val(b, r);
    put(b, " = \"%s\"", name);
    put_operands(b, ops, n);
    if (attrs && *attrs) put(b, " {%s}", attrs);
    put_sig(b, ops, n, &rt, 1);
    return r;
}

char *sh_finish(sh_b *b, const sh_val *results, int n) {
    if (!valid(b, results, n)) return NULL;
    sh_b h;
    sh_init(&h);
    put(&h, "module @ember {\n  func.func public @main(");
    for (int i = 0; i < b->n_params; i++) {
        put(&h, "%s%%v%d: ", i ? ", " : "", i);
        put_type(&h, &b->params[i]);
    }
    put(&h, ") -> (");
    for (int i = 0; i < n; i++) {
        if (i) put(&h, ", ");
        put_type(&h, &results[i].t);
    }
    put(&h, ") {\n");
    if (b->len) put(&h, "%s", b->body);
    put(&h, "    \"func.return\"");
    put_operands(&h, results, n);
    put(&h, " : (");
    for (int i = 0; i < n; i++) {
        if (i) put(&h, ", ");
        put_type(&h, &results[i].t);
    }
    put(&h, ") -> ()\n  }\n%s}\n", sh_funcs(b));
    if (h.err[0]) {
        sh_fail(b, "%s", h.err);
        sh_free(&h);
        return NULL;
    }
    return h.body;
}

/* ---- constants ---- */

static void put_scalar(sh_b *b, sh_elem e, double v) {
    switch (e) {
    case SH_F32: {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        put(b, "0x%08" PRIX32, u);
        break;
    }
    case SH_F64: {
        uint64_t u;
        memcpy(&u, &v, 8);
        put(b, "0x%016" PRIX64, u);
        break;
    }
    case SH_BF16: put(b, "0x%04X", (unsigned)em_f32_to_bf16((float)v)); break;
    case SH_F16: put(b, "0x%04X", (unsigned)em_f32_to_f16((float)v)); break;
    case SH_I1: put(b, "%s", v != 0 ? "true" : "false"); break;
    default: put(b, "%" PRId64, (int64_t)v); break;
    }
}

static sh_val const_with(sh_b *b, sh_type t, int kind, double f, int64_t i, uint64_t u) {
    if (b->err[0]) return bad();
    sh_val r = fresh(b, t);
    put(b, "    ");
    put_val(b, r);
    put(b, " = \"stablehlo.constant\"() {value = dense<");
    if (kind == 0 || sh_elem_is_float(t.e) || t.e == SH_I1)
        put_scalar(b, t.e, kind == 0 ? f : kind == 1 ? (double)i : (double)u);
    else if (kind == 1)
        put(b, "%" PRId64, i);
    else
        put(b, "%" PRIu64, u);
    put(b, "> : ");
    put_type(b, &t);
    put(b, "} : () -> ");
    put_type(b, &t);
    put(b, "\n");
    return r;
}

sh_val sh_const(sh_b *b, sh_type t, double v) {
    if (sh_elem_is_int(t.e)) {
        if (v != v) v = 0;
        if (sh_elem_is_unsigned(t.e)) return const_with(b, t, 2, 0, 0, v <= 0 ? 0 : (uint64_t)v);
        return const_with(b, t, 1, 0, (int64_t)v, 0);
    }
    return const_with(b, t, 0, v, 0, 0);
}

sh_val sh_const_i(sh_b *b, sh_type t, int64_t v) { return const_with(b, t, 1, 0, v, 0); }
sh_val sh_const_u(sh_b *b, sh_type t, uint64_t v) { return const_with(b, t, 2, 0, 0, v); }

sh_val sh_const_vec_i64(sh_b *b, const int64_t *v, int n) {
    if (b->err[0]) return bad();
    int64_t d = n;
    sh_type t = sh_ty(SH_I64, 1, &d);
    sh_val r = fresh(b, t);
    put(b, "    ");
    put_val(b, r);
    put(b, " = \"stablehlo.constant\"() {value = dense<[");
    for (int i = 0; i < n; i++) put(b, "%s%" PRId64, i ? ", " : "", v[i]);
    put(b, "]> : ");
    put_type(b, &t);
    put(b, "} : () -> ");
    put_type(b, &t);
    put(b, "\n");
    return r;
}

sh_val sh_zeros_like(sh_b *b, sh_val x) { return sh_const(b, x.t, 0); }

/* ---- element-wise ---- */

sh_val sh_un(sh_b *b, const char *op, sh_val x) {
    char name[64];
    snprintf(name, sizeof name, "stablehlo.%s", op);
    return sh_op(b, name, &x, 1, NULL, x.t);
}

sh_val sh_bin(sh_b *b, const char *op, sh_val x, sh_val y) {
    if (!valid(b, &x, 1) || !valid(b, &y, 1)) return bad();
    if (!sh_same_shape(&x.t, &y.t) || x.t.e != y.t.e) {
        sh_fail(b, "%s: operand types differ", op);
        return bad();
    }
    char name[64];
    snprintf(name, sizeof name, "stablehlo.%s", op);
    sh_val ops[2] = {x, y};
    return sh_op(b, name, ops, 2, NULL, x.t);
}

sh_val sh_nan_aware(sh_b *b, const char *op, sh_val x, sh_val y) {
    bool mx = !strcmp(op, "max_nan");
    if (!mx && strcmp(op, "min_nan")) return sh_bin(b, op, x, y);
    /* (x > y || x != x) ? x : y, as C and torch: a NaN on either side wins */
    sh_val pick = sh_bin(b, "or", sh_cmp(b, mx ? "GT" : "LT", x, y), sh_cmp(b, "NE", x, x));
    return sh_select(b, pick, x, y);
}

sh_val sh_bin_c(sh_b *b, const char *op, sh_val x, double v) {
    return sh_bin(b, op, x, sh_const(b, x.t, v));
}

sh_val sh_cmp(sh_b *b, const char *dir, sh_val x, sh_val y) {
    if (!valid(b, &x, 1) || !valid(b, &y, 1)) return bad();
    const char *ct = sh_elem_is_float(x.t.e)                          ? "FLOAT"
                     : (sh_elem_is_unsigned(x.t.e) || x.t.e == SH_I1) ? "UNSIGNED"
                                                                      : "SIGNED";
    char attrs[160];
    snprintf(attrs, sizeof attrs,
             "comparison_direction = #stablehlo<comparison_direction %s>, "
             "compare_type = #stablehlo<comparison_type %s>",
             dir, ct);
    sh_val ops[2] = {x, y};
    return sh_op(b, "stablehlo.compare", ops, 2, attrs, sh_ty_with(x.t, SH_I1));
}

sh_val sh_select(sh_b *b, sh_val pred, sh_val on_true, sh_val on_false) {
    sh_val ops[3] = {pred, on_true, on_false};
    return sh_op(b, "stablehlo.select", ops, 3, NULL, on_true.t);
}

sh_val sh_convert(sh_b *b, sh_val x, sh_elem e) {
    if (x.id >= 0 && x.t.e == e) return x;
    return sh_op(b, "stablehlo.convert", &x, 1, NULL, sh_ty_with(x.t, e));
}

sh_val sh_bitcast(sh_b *b, sh_val x, sh_elem e) {
    if (x.id >= 0 && x.t.e == e) return x;
    return sh_op(b, "stablehlo.bitcast_convert", &x, 1, NULL, sh_ty_with(x.t, e));
}

/* ---- shapes ---- */

char *sh_ints(char *buf, size_t n, const int64_t *v, int k) {
    size_t u = 0;
    buf[0] = 0;
    for (int i = 0; i < k && u < n; i++) {
        int w = snprintf(buf + u, n - u, "%s%" PRId64, i ? ", " : "", v[i]);
        if (w < 0) break;
        u += (size_t)w;
    }
    return buf;
}

char *sh_dims(char *buf, size_t n, const int *v, int k) {
    int64_t t[EM_MAX_DIMS * 2];
    for (int i = 0; i < k && i < EM_MAX_DIMS * 2; i++) t[i] = v[i];
    return sh_ints(buf, n, t, k);
}

/* "name = array<i64: a, b>" (or "array<i64>" when empty) */
static void arr_attr(char *out, size_t n, const char *name, const int64_t *v, int k) {
    char l[256];
    sh_ints(l, sizeof l, v, k);
    if (k)
        snprintf(out, n, "%s = array<i64: %s>", name, l);
    else
        snprintf(out, n, "%s = array<i64>", name);
}

sh_val sh_reshape(sh_b *b, sh_val x, int nd, const int64_t *d) {
    if (!valid(b, &x, 1)) return bad();
    sh_type t = sh_ty(x.t.e, nd, d);
    if (sh_numel(&t) != sh_numel(&x.t)) {
        sh_fail(b, "reshape changes the element count");
        return bad();
    }
    if (sh_same_shape(&t, &x.t)) return x;
    return sh_op(b, "stablehlo.reshape", &x, 1, NULL, t);
}

sh_val sh_transpose(sh_b *b, sh_val x, const int *perm) {
    if (!valid(b, &x, 1)) return bad();
    bool id = true;
    int64_t p[EM_MAX_DIMS];
    sh_type t = x.t;
    for (int i = 0; i < x.t.nd; i++) {
        p[i] = perm[i];
        t.d[i] = x.t.d[perm[i]];
        id &= perm[i] == i;
    }
    if (id) return x;
    char a[256];
    arr_attr(a, sizeof a, "permutation", p, x.t.nd);
    return sh_op(b, "stablehlo.transpose", &x, 1, a, t);
}

sh_val sh_bcast_in_dim(sh_b *b, sh_val x, const int *map, int nd, const int64_t *d) {
    if (!valid(b, &x, 1)) return bad();
    sh_type t = sh_ty(x.t.e, nd, d);
    bool id = x.t.nd == nd;
    int64_t m[EM_MAX_DIMS];
    for (int i = 0; i < x.t.nd; i++) {
        m[i] = map[i];
        id &= map[i] == i && x.t.d[i] == d[i];
        if (map[i] < 0 || map[i] >= nd || (x.t.d[i] != 1 && x.t.d[i] != d[map[i]])) {
            sh_fail(b, "broadcast_in_dim: operand dim %d does not fit", i);
            return bad();
        }
    }
    if (id) return x;
    char a[256];
    arr_attr(a, sizeof a, "broadcast_dimensions", m, x.t.nd);
    return sh_op(b, "stablehlo.broadcast_in_dim", &x, 1, a, t);
}

sh_val sh_bcast_to(sh_b *b, sh_val x, int nd, const int64_t *d) {
    int map[EM_MAX_DIMS];
    if (x.t.nd > nd) {
        sh_fail(b, "broadcast to fewer dims");
        return bad();
    }
    for (int i = 0; i < x.t.nd; i++) map[i] = i + (nd - x.t.nd);
    return sh_bcast_in_dim(b, x, map, nd, d);
}

sh_val sh_slice(sh_b *b, sh_val x, const int64_t *start, const int64_t *limit,
                const int64_t *stride) {
    if (!valid(b, &x, 1)) return bad();
    sh_type t = x.t;
    bool id = true;
    for (int i = 0; i < x.t.nd; i++) {
        if (start[i] < 0 || limit[i] < start[i] || limit[i] > x.t.d[i] || stride[i] < 1) {
            sh_fail(b, "slice out of range in dim %d", i);
            return bad();
        }
        t.d[i] = (limit[i] - start[i] + stride[i] - 1) / stride[i];
        id &= start[i] == 0 && limit[i] == x.t.d[i] && stride[i] == 1;
    }
    if (id) return x;
    char a1[256], a2[256], a3[256], all[800];
    arr_attr(a1, sizeof a1, "start_indices", start, x.t.nd);
    arr_attr(a2, sizeof a2, "limit_indices", limit, x.t.nd);
    arr_attr(a3, sizeof a3, "strides", stride, x.t.nd);
    snprintf(all, sizeof all, "%s, %s, %s", a1, a2, a3);
    return sh_op(b, "stablehlo.slice", &x, 1, all, t);
}

sh_val sh_slice_dim(sh_b *b, sh_val x, int dim, int64_t start, int64_t limit, int64_t stride) {
    int64_t s[EM_MAX_DIMS], l[EM_MAX_DIMS], st[EM_MAX_DIMS];
    for (int i = 0; i < x.t.nd; i++) {
        s[i] = 0;
        l[i] = x.t.d[i];
        st[i] = 1;
    }
    s[dim] = start;
    l[dim] = limit;
    st[dim] = stride;
    return sh_slice(b, x, s, l, st);
}

sh_val sh_concat(sh_b *b, const sh_val *xs, int n, int dim) {
    if (!valid(b, xs, n) || n < 1) return bad();
    if (n == 1) return xs[0];
    sh_type t = xs[0].t;
    t.d[dim] = 0;
    for (int i = 0; i < n; i++) t.d[dim] += xs[i].t.d[dim];
    char a[64];
    snprintf(a, sizeof a, "dimension = %d : i64", dim);
    return sh_op(b, "stablehlo.concatenate", xs, n, a, t);
}

sh_val sh_pad(sh_b *b, sh_val x, sh_val pad_value, const int64_t *lo, const int64_t *hi,
              const int64_t *interior) {
    if (!valid(b, &x, 1)) return bad();
    sh_type t = x.t;
    for (int i = 0; i < x.t.nd; i++)
        t.d[i] = lo[i] + hi[i] + x.t.d[i] + (x.t.d[i] > 0 ? (x.t.d[i] - 1) * interior[i] : 0);
    char a1[256], a2[256], a3[256], all[800];
    arr_attr(a1, sizeof a1, "edge_padding_low", lo, x.t.nd);
    arr_attr(a2, sizeof a2, "edge_padding_high", hi, x.t.nd);
    arr_attr(a3, sizeof a3, "interior_padding", interior, x.t.nd);
    snprintf(all, sizeof all, "%s, %s, %s", a1, a2, a3);
    sh_val ops[2] = {x, pad_value};
    return sh_op(b, "stablehlo.pad", ops, 2, all, t);
}

sh_val sh_iota(sh_b *b, sh_type t, int dim) {
    if (b->err[0]) return bad();
    char a[64];
    snprintf(a, sizeof a, "iota_dimension = %d : i64", dim);
    return sh_op(b, "stablehlo.iota", NULL, 0, a, t);
}

sh_val sh_dynamic_update_slice(sh_b *b, sh_val x, sh_val upd, const sh_val *idx) {
    sh_val ops[2 + EM_MAX_DIMS];
    ops[0] = x;
    ops[1] = upd;
    for (int i = 0; i < x.t.nd; i++) ops[2 + i] = idx[i];
    return sh_op(b, "stablehlo.dynamic_update_slice", ops, 2 + x.t.nd, NULL, x.t);
}

/* ---- regions ---- */

/* Opens `%r = "name"(ops) ({` + block header with n_args scalar args of the given elements;
 * writes their values to args. */
static void region_open(sh_b *b, sh_val r, int nres, const char *name, const sh_val *ops, int n,
                        const sh_elem *arg_e, int n_args, sh_val *args) {
    put(b, "    ");
    if (nres == 1)
        put(b, "%%v%d", r.id);
    else
        put(b, "%%v%d:%d", r.id, nres);
    put(b, " = \"%s\"", name);
    put_operands(b, ops, n);
    put(b, " ({\n    ^bb0(");
    for (int i = 0; i < n_args; i++) {
        args[i] = fresh(b, sh_scalar_ty(arg_e[i]));
        put(b, "%s", i ? ", " : "");
        put_val(b, args[i]);
        put(b, ": ");
        put_type(b, &args[i].t);
    }
    put(b, "):\n");
}

static void region_return(sh_b *b, const sh_val *vals, int n) {
    put(b, "    \"stablehlo.return\"");
    put_operands(b, vals, n);
    put(b, " : (");
    for (int i = 0; i < n; i++) {
        if (i) put(b, ", ");
        put_type(b, &vals[i].t);
    }
    put(b, ") -> ()\n");
}

/* Closes the region: `}) {attrs} : sig` */
static void region_close(sh_b *b, const char *attrs, const sh_val *ops, int n, const sh_type *rts,
                         int nr) {
    put(b, "    })");
    if (attrs && *attrs) put(b, " {%s}", attrs);
    put_sig(b, ops, n, rts, nr);
}

/* A result value of a multi-result op. */
static sh_val sub_of(sh_val r, int k, sh_type t) {
    r.sub = k;
    r.t = t;
    return r;
}

sh_val sh_reduce(sh_b *b, sh_val x, sh_val init, const int *dims, int ndims, const char *body_op) {
    sh_val ops[2] = {x, init};
    if (!valid(b, ops, 2)) return bad();
    if (ndims == 0) return x;
    sh_type rt = x.t;
    rt.nd = 0;
    bool red[EM_MAX_DIMS] = {false};
    for (int i = 0; i < ndims; i++) red[dims[i]] = true;
    for (int i = 0; i < x.t.nd; i++)
        if (!red[i]) rt.d[rt.nd++] = x.t.d[i];
    sh_val r = fresh(b, rt);
    sh_elem ae[2] = {x.t.e, x.t.e};
    sh_val args[2];
    region_open(b, r, 1, "stablehlo.reduce", ops, 2, ae, 2, args);
    sh_val s = sh_nan_aware(b, body_op, args[0], args[1]);
    region_return(b, &s, 1);
    char dl[128], a[160];
    snprintf(a, sizeof a, "dimensions = array<i64: %s>", sh_dims(dl, sizeof dl, dims, ndims));
    region_close(b, a, ops, 2, &rt, 1);
    return r;
}

sh_val sh_collective(sh_b *b, const char *name, sh_val x, const char *body_op,
                     const char *attrs, sh_type rt) {
    if (!valid(b, &x, 1)) return bad();
    if (!body_op) return sh_op(b, name, &x, 1, attrs, rt);
    sh_val r = fresh(b, rt);
    sh_elem ae[2] = {x.t.e, x.t.e};
    sh_val args[2];
    region_open(b, r, 1, name, &x, 1, ae, 2, args);
    sh_val s = sh_bin(b, body_op, args[0], args[1]);
    region_return(b, &s, 1);
    region_close(b, attrs, &x, 1, &rt, 1);
    return r;
}

/* pick_a for (a, ai) against (b, bi). */
static sh_val arg_pick(sh_b *b, sh_val a, sh_val ai, sh_val c, sh_val ci, bool max) {
    sh_val better = sh_cmp(b, max ? "GT" : "LT", a, c);
    sh_val eq = sh_cmp(b, "EQ", a, c);
    sh_val first = sh_cmp(b, "LT", ai, ci);
    if (!sh_elem_is_float(a.t.e)) return sh_bin(b, "or", better, sh_bin(b, "and", eq, first));
    sh_val an = sh_cmp(b, "NE", a, a), cn = sh_cmp(b, "NE", c, c);
    sh_val t = sh_const(b, an.t, 1);
    sh_val not_cn = sh_bin(b, "xor", cn, t), not_an = sh_bin(b, "xor", an, t);
    sh_val p1 = sh_bin(b, "and", an, not_cn);
    sh_val p2 = sh_bin(b, "and", sh_bin(b, "and", not_an, not_cn), better);
    sh_val tie = sh_bin(b, "or", sh_bin(b, "and", an, cn), eq);
    sh_val p3 = sh_bin(b, "and", tie, first);
    return sh_bin(b, "or", sh_bin(b, "or", p1, p2), p3);
}

void sh_argreduce(sh_b *b, sh_val x, int dim, bool max, sh_elem idx_e, sh_val *val, sh_val *idx) {
    *val = *idx = bad();
    if (!valid(b, &x, 1)) return;
    sh_val io = sh_iota(b, sh_ty_with(x.t, idx_e), dim);
    sh_type st = sh_scalar_ty(x.t.e);
    double lowest = sh_elem_is_float(x.t.e) ? (max ? -INFINITY : INFINITY) : 0;
    sh_val iv;
    if (sh_elem_is_float(x.t.e)) {
        iv = sh_const(b, st, lowest);
    } else {
        int64_t lo = x.t.e == SH_I64 ? INT64_MIN : x.t.e == SH_I32 ? INT32_MIN
                   : x.t.e == SH_I16 ? INT16_MIN : x.t.e == SH_I8 ? INT8_MIN : 0;
        int64_t hi = x.t.e == SH_I64 ? INT64_MAX : x.t.e == SH_I32 ? INT32_MAX
                   : x.t.e == SH_I16 ? INT16_MAX : x.t.e == SH_I8 ? INT8_MAX : 255;
        iv = sh_const_i(b, st, max ? lo : hi);
    }
    sh_val ii = sh_const_i(b, sh_scalar_ty(idx_e), idx_e == SH_I64 ? INT64_MAX : INT32_MAX);
    sh_val ops[4] = {x, io, iv, ii};
    if (!valid(b, ops, 4)) return;
    sh_type rt = x.t;
    rt.nd = 0;
    for (int i = 0; i < x.t.nd; i++)
        if (i != dim) rt.d[rt.nd++] = x.t.d[i];
    sh_type rts[2] = {rt, sh_ty_with(rt, idx_e)};
    sh_val r = fresh(b, rt);
    sh_elem ae[4] = {x.t.e, idx_e, x.t.e, idx_e};
    sh_val a[4];
    region_open(b, r, 2, "stablehlo.reduce", ops, 4, ae, 4, a);
    sh_val pick = arg_pick(b, a[0], a[1], a[2], a[3], max);
    sh_val res[2] = {sh_select(b, pick, a[0], a[2]), sh_select(b, pick, a[1], a[3])};
    region_return(b, res, 2);
    char at[64];
    snprintf(at, sizeof at, "dimensions = array<i64: %d>", dim);
    region_close(b, at, ops, 4, rts, 2);
    *val = sub_of(r, 0, rts[0]);
    *idx = sub_of(r, 1, rts[1]);
}

/* ---- linear algebra ---- */

sh_val sh_dot(sh_b *b, sh_val x, sh_val y, const int *lb, const int *rb, int nb, const int *lc,
              const int *rc, int nc, sh_elem re) {
    sh_val ops[2] = {x, y};
    if (!valid(b, ops, 2)) return bad();
    sh_type t;
    memset(&t, 0, sizeof t);
    t.e = re;
    bool lused[EM_MAX_DIMS] = {false}, rused[EM_MAX_DIMS] = {false};
    for (int i = 0; i < nb; i++) {
        t.d[t.nd++] = x.t.d[lb[i]];
        lused[lb[i]] = rused[rb[i]] = true;
    }
    for (int i = 0; i < nc; i++) {
        lused[lc[i]] = rused[rc[i]] = true;
        if (x.t.d[lc[i]] != y.t.d[rc[i]]) {
            sh_fail(b, "dot_general: contracting sizes differ");
            return bad();
        }
    }
    for (int i = 0; i < x.t.nd; i++)
        if (!lused[i]) t.d[t.nd++] = x.t.d[i];
    for (int i = 0; i < y.t.nd; i++)
        if (!rused[i]) t.d[t.nd++] = y.t.d[i];
    char l1[64], l2[64], l3[64], l4[64], a[600];
    int u = snprintf(a, sizeof a, "dot_dimension_numbers = #stablehlo.dot<");
    const char *sep = "";
    if (nb) {
        u += snprintf(a + u, sizeof a - (size_t)u,
                      "lhs_batching_dimensions = [%s], rhs_batching_dimensions = [%s]",
                      sh_dims(l1, sizeof l1, lb, nb), sh_dims(l2, sizeof l2, rb, nb));
        sep = ", ";
    }
    if (nc)
        u += snprintf(a + u, sizeof a - (size_t)u,
                      "%slhs_contracting_dimensions = [%s], rhs_contracting_dimensions = [%s]", sep,
                      sh_dims(l3, sizeof l3, lc, nc), sh_dims(l4, sizeof l4, rc, nc));
    /* f32 and f64 products at full precision everywhere (TPUs and GPUs would otherwise use
     * bf16 passes or TF32 for f32), so every device gives the CPU's answer */
    bool full = x.t.e == SH_F32 || x.t.e == SH_F64;
    snprintf(a + u, sizeof a - (size_t)u, ">%s",
             full ? ", precision_config = [#stablehlo<precision HIGHEST>, "
                    "#stablehlo<precision HIGHEST>]"
                  : "");
    return sh_op(b, "stablehlo.dot_general", ops, 2, a, t);
}

/* ---- indexing ---- */

static int list_attr(char *out, size_t n, const char *sep, const char *name, const int *v, int k) {
    char l[128];
    return snprintf(out, n, "%s%s = [%s]", sep, name, sh_dims(l, sizeof l, v, k));
}

sh_val sh_gather(sh_b *b, sh_val x, sh_val idx, const sh_gather_dims *g, sh_type rt) {
    sh_val ops[2] = {x, idx};
    if (!valid(b, ops, 2)) return bad();
    char a[1200];
    int u = snprintf(a, sizeof a, "dimension_numbers = #stablehlo.gather<");
    u += list_attr(a + u, sizeof a - (size_t)u, "", "offset_dims", g->offset_dims, g->n_offset);
    u += list_attr(a + u, sizeof a - (size_t)u, ", ", "collapsed_slice_dims", g->collapsed,
                   g->n_collapsed);
    if (g->n_operand_batching) {
        u += list_attr(a + u, sizeof a - (size_t)u, ", ", "operand_batching_dims",
                       g->operand_batching, g->n_operand_batching);
        u += list_attr(a + u, sizeof a - (size_t)u, ", ", "start_indices_batching_dims",
                       g->start_batching, g->n_start_batching);
    }
    u += list_attr(a + u, sizeof a - (size_t)u, ", ", "start_index_map", g->start_index_map,
                   g->n_start_index_map);
    char sl[256];
    snprintf(a + u, sizeof a - (size_t)u,
             ", index_vector_dim = %d>, indices_are_sorted = false, slice_sizes = array<i64: %s>",
             g->index_vector_dim, sh_ints(sl, sizeof sl, g->slice_sizes, x.t.nd));
    return sh_op(b, "stablehlo.gather", ops, 2, a, rt);
}

sh_val sh_scatter(sh_b *b, sh_val x, sh_val idx, sh_val upd, const sh_scatter_dims *s,
                  const char *body_op) {
    sh_val ops[3] = {x, idx, upd};
    if (!valid(b, ops, 3)) return bad();
    sh_val r = fresh(b, x.t);
    sh_elem ae[2] = {x.t.e, x.t.e};
    sh_val args[2];
    region_open(b, r, 1, "stablehlo.scatter", ops, 3, ae, 2, args);
    sh_val res = body_op ? sh_bin(b, body_op, args[0], args[1]) : args[1];
    region_return(b, &res, 1);
    char a[1200];
    int u = snprintf(a, sizeof a, "indices_are_sorted = false, "
                                  "scatter_dimension_numbers = #stablehlo.scatter<");
    u += list_attr(a + u, sizeof a - (size_t)u, "", "update_window_dims", s->update_window,
                   s->n_update_window);
    u += list_attr(a + u, sizeof a - (size_t)u, ", ", "inserted_window_dims", s->inserted_window,
                   s->n_inserted_window);
    if (s->n_input_batching) {
        u += list_attr(a + u, sizeof a - (size_t)u, ", ", "input_batching_dims",
                       s->input_batching, s->n_input_batching);
        u += list_attr(a + u, sizeof a - (size_t)u, ", ", "scatter_indices_batching_dims",
                       s->indices_batching, s->n_indices_batching);
    }
    u += list_attr(a + u, sizeof a - (size_t)u, ", ", "scatter_dims_to_operand_dims",
                   s->to_operand, s->n_to_operand);
    snprintf(a + u, sizeof a - (size_t)u, ", index_vector_dim = %d>, unique_indices = false",
             s->index_vector_dim);
    region_close(b, a, ops, 3, &x.t, 1);
    return r;
}

sh_val sh_take_along(sh_b *b, sh_val x, sh_val idx, int dim) {
    if (!valid(b, &idx, 1) || !valid(b, &x, 1)) return bad();
    int nd = x.t.nd, r = idx.t.nd;
    if (dim < 0 || dim >= nd || nd - 1 + r > EM_MAX_DIMS) {
        sh_fail(b, "take along dim %d of %d dims with %d-d indices", dim, nd, r);
        return bad();
    }
    /* the result: x's dims with `dim` replaced by the indices' dims; every other dim of x is a
     * whole slice (an offset dim of the gather) */
    sh_gather_dims g;
    memset(&g, 0, sizeof g);
    sh_type rt = {x.t.e, nd - 1 + r, {0}};
    for (int d = 0, k = 0; d < nd; d++) {
        g.slice_sizes[d] = d == dim ? 1 : x.t.d[d];
        if (d == dim) {
            for (int j = 0; j < r; j++) rt.d[k++] = idx.t.d[j];
        } else {
            g.offset_dims[g.n_offset++] = k;
            rt.d[k++] = x.t.d[d];
        }
    }
    g.collapsed[0] = g.start_index_map[0] = dim;
    g.n_collapsed = g.n_start_index_map = 1;
    g.index_vector_dim = r;
    return sh_gather(b, x, idx, &g, rt);
}

sh_val sh_scatter_along(sh_b *b, sh_val x, sh_val idx, sh_val upd, int dim, const char *body_op) {
    if (!valid(b, &idx, 1) || !valid(b, &x, 1) || !valid(b, &upd, 1)) return bad();
    int nd = x.t.nd;
    int64_t n = sh_numel(&idx.t), n1[2] = {n, 1};
    if (dim < 0 || dim >= nd || idx.t.nd > 1 || upd.t.nd != nd) {
        sh_fail(b, "scatter along dim %d of %d dims: %d-d indices, %d-d updates", dim, nd,
                idx.t.nd, upd.t.nd);
        return bad();
    }
    sh_scatter_dims s;
    memset(&s, 0, sizeof s);
    s.inserted_window[0] = s.to_operand[0] = dim;
    s.n_inserted_window = s.n_to_operand = 1;
    s.index_vector_dim = 1;
    /* updates: the index dim first, then the window dims in order */
    int perm[EM_MAX_DIMS], k = 0;
    perm[k++] = dim;
    for (int d = 0; d < nd; d++)
        if (d != dim) perm[k++] = d;
    for (int d = 1; d < nd; d++) s.update_window[s.n_update_window++] = d;
    sh_val ix = sh_reshape(b, idx, 2, n1);
    return sh_scatter(b, x, ix, sh_transpose(b, upd, perm), &s, body_op);
}

void sh_sort(sh_b *b, const sh_val *ops, int n, int dim, bool descending, sh_val *out) {
    for (int i = 0; i < n; i++) out[i] = bad();
    if (!valid(b, ops, n) || n > 8) return;
    sh_type rts[8];
    sh_elem ae[16];
    for (int i = 0; i < n; i++) {
        rts[i] = ops[i].t;
        ae[2 * i] = ae[2 * i + 1] = ops[i].t.e;
    }
    sh_val r = fresh(b, rts[0]);
    sh_val a[16];
    region_open(b, r, n, "stablehlo.sort", ops, n, ae, 2 * n, a);
    sh_val lhs = a[0], rhs = a[1], less;
    if (sh_elem_is_float(lhs.t.e)) {
        /* NaN is the largest value */
        sh_val ln = sh_cmp(b, "NE", lhs, lhs), rn = sh_cmp(b, "NE", rhs, rhs);
        sh_val t = sh_const(b, ln.t, 1);
        if (descending) {
            sh_val gt = sh_cmp(b, "GT", lhs, rhs);
            less = sh_bin(b, "or", sh_bin(b, "and", ln, sh_bin(b, "xor", rn, t)), gt);
        } else {
            sh_val lt = sh_cmp(b, "LT", lhs, rhs);
            less = sh_bin(b, "or", sh_bin(b, "and", rn, sh_bin(b, "xor", ln, t)), lt);
        }
    } else {
        less = sh_cmp(b, descending ? "GT" : "LT", lhs, rhs);
    }
    region_return(b, &less, 1);
    char at[80];
    snprintf(at, sizeof at, "dimension = %d : i64, is_stable = true", dim);
    region_close(b, at, ops, n, rts, n);
    if (n == 1) {
        out[0] = r;
        return;
    }
    for (int i = 0; i < n; i++) out[i] = sub_of(r, i, rts[i]);
}

sh_val sh_reduce_window(sh_b *b, sh_val x, sh_val init, const int64_t *win, const int64_t *stride,
                        const char *body_op) {
    sh_val ops[2] = {x, init};
    if (!valid(b, ops, 2)) return bad();
    sh_type rt = x.t;
    for (int i = 0; i < x.t.nd; i++) {
        if (win[i] < 1 || stride[i] < 1 || win[i] > x.t.d[i]) {
            sh_fail(b, "reduce_window: window does not fit dim %d", i);
            return bad();
        }
        rt.d[i] = (x.t.d[i] - win[i]) / stride[i] + 1;
    }
    sh_val r = fresh(b, rt);
    sh_elem ae[2] = {x.t.e, x.t.e};
    sh_val args[2];
    region_open(b, r, 1, "stablehlo.reduce_window", ops, 2, ae, 2, args);
    sh_val s = sh_bin(b, body_op, args[0], args[1]);
    region_return(b, &s, 1);
    char a1[256], a2[256], all[600];
    arr_attr(a1, sizeof a1, "window_dimensions", win, x.t.nd);
    arr_attr(a2, sizeof a2, "window_strides", stride, x.t.nd);
    snprintf(all, sizeof all, "%s, %s", a1, a2);
    region_close(b, all, ops, 2, &rt, 1);
    return r;
}

sh_val sh_const_vec(sh_b *b, sh_elem e, const double *v, int nd, const int64_t *d) {
    if (b->err[0]) return bad();
    sh_type t = sh_ty(e, nd, d);
    int64_t n = sh_numel(&t);
    sh_val r = fresh(b, t);
    put(b, "    ");
    put_val(b, r);
    /* a flat list with a shaped type: MLIR reads it row-major only when nested, so reshape */
    int64_t flat = n;
    sh_type ft = sh_ty(e, 1, &flat);
    put(b, " = \"stablehlo.constant\"() {value = dense<[");
    for (int64_t i = 0; i < n; i++) {
        if (i) put(b, ", ");
        put_scalar(b, e, v[i]);
    }
    put(b, "]> : ");
    put_type(b, &ft);
    put(b, "} : () -> ");
    put_type(b, &ft);
    put(b, "\n");
    r.t = ft;
    return sh_reshape(b, r, nd, d);
}

sh_val sh_dynamic_slice(sh_b *b, sh_val x, const sh_val *idx, const int64_t *sizes) {
    sh_val ops[1 + EM_MAX_DIMS];
    ops[0] = x;
    for (int i = 0; i < x.t.nd; i++) ops[1 + i] = idx[i];
    char a[256];
    arr_attr(a, sizeof a, "slice_sizes", sizes, x.t.nd);
    return sh_op(b, "stablehlo.dynamic_slice", ops, 1 + x.t.nd, a, sh_ty(x.t.e, x.t.nd, sizes));
}

void sh_for(sh_b *b, int64_t n, sh_val *vals, int nv, sh_body_fn body, void *user) {
    if (!valid(b, vals, nv) || nv > 15) return;
    sh_type it = sh_scalar_ty(SH_I64);
    sh_val ops[16];
    ops[0] = sh_const_i(b, it, 0);
    sh_type rts[16];
    sh_elem unused[1];
    (void)unused;
    rts[0] = it;
    for (int i = 0; i < nv; i++) {
        ops[1 + i] = vals[i];
        rts[1 + i] = vals[i].t;
    }
    int n_ops = nv + 1;
    sh_val r = fresh(b, it);
    put(b, "    %%v%d:%d = \"stablehlo.while\"", r.id, n_ops);
    put_operands(b, ops, n_ops);
    /* condition */
    put(b, " ({\n    ^bb0(");
    sh_val ca[16];
    for (int i = 0; i < n_ops; i++) {
        ca[i] = fresh(b, rts[i]);
        put(b, "%s", i ? ", " : "");
        put_val(b, ca[i]);
        put(b, ": ");
        put_type(b, &rts[i]);
    }
    put(b, "):\n");
    sh_val lt = sh_cmp(b, "LT", ca[0], sh_const_i(b, it, n));
    region_return(b, &lt, 1);
    /* body */
    put(b, "    }, {\n    ^bb0(");
    sh_val ba[16];
    for (int i = 0; i < n_ops; i++) {
        ba[i] = fresh(b, rts[i]);
        put(b, "%s", i ? ", " : "");
        put_val(b, ba[i]);
        put(b, ": ");
        put_type(b, &rts[i]);
    }
    put(b, "):\n");
    sh_val nvals[16];
    for (int i = 0; i < nv; i++) nvals[i] = ba[1 + i];
    body(b, ba[0], nvals, nv, user);
    sh_val ret[16];
    ret[0] = sh_bin(b, "add", ba[0], sh_const_i(b, it, 1));
    for (int i = 0; i < nv; i++) ret[1 + i] = nvals[i];
    region_return(b, ret, n_ops);
    region_close(b, NULL, ops, n_ops, rts, n_ops);
    for (int i = 0; i < nv; i++) vals[i] = sub_of(r, 1 + i, rts[1 + i]);
}
