/* Op test cases from committed torch/numpy fixtures (see op_cases.h). */
#include "testing/op_cases.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file_read.h"
#include "core/tensor_impl.h"
#include "ops/dispatch.h"

struct em_opcase_set {
    json_t *root;
    json_t *cases;
    unsigned char *data;
    size_t data_len;
    char path[512];
    bool tie_tolerant;
    bool ulp_tolerant; /* em_opcases_set_ulp_tolerant */
    bool compiled;
};

void em_opcases_set_compiled(em_opcase_set *s, bool on) { s->compiled = on; }

/* ---- compile mode: each case's op call traced and run as a compiled function ---- */

typedef struct compiled_case {
    const em_op_def *op;
    const em_attr *attrs;
    int n_in;
    em_tensor *const *in; /* the case's inputs (NULL entries: absent optional inputs) */
} compiled_case;

static int case_fn(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                   int n_statics, em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)statics, (void)n_statics, (void)max_out;
    const compiled_case *cc = user;
    em_tensor *args[EM_MAX_INPUTS] = {NULL};
    int k = 0;
    for (int i = 0; i < cc->n_in; i++) {
        if (!cc->in[i]) continue;
        /* an in-place op's destination is captured (a compiled function writes into captured
         * tensors, as into a KV cache; its inputs are copies) */
        args[i] = i == 0 && cc->op->n_out == 0 ? cc->in[0] : in[k++];
    }
    int n_out = 0;
    em_op_run(c, __FILE__, __LINE__, cc->op->id, args, cc->n_in, cc->attrs, out, EM_MAX_OUTPUTS,
              &n_out);
    return em_ctx_status(c) ? -1 : n_out;
}

static void run_op(em_ctx *c, const em_opcase_set *s, const em_op_def *op, em_tensor *const *in,
                   int n_in, const em_attr *attrs, em_tensor **outs, int *n_out) {
    if (!s->compiled) {
        em_op_run(c, __FILE__, __LINE__, op->id, in, n_in, attrs, outs, EM_MAX_OUTPUTS, n_out);
        return;
    }
    compiled_case cc = {op, attrs, n_in, in};
    em_tensor *args[EM_MAX_INPUTS];
    int k = 0;
    for (int i = 0; i < n_in; i++)
        if (in[i] && !(i == 0 && op->n_out == 0)) args[k++] = in[i];
    em_compiled *f = em_compile(c, op->name, case_fn, &cc);
    int n = f ? em_compiled_call(c, f, args, k, NULL, 0, outs, EM_MAX_OUTPUTS) : -1;
    em_compiled_free(f);
    *n_out = n < 0 ? 0 : n;
}


em_opcase_set *em_opcases_load(em_ctx *c, const char *json_path) {
    em_opcase_set *s = calloc(1, sizeof *s);
    if (!s) {
        em_ctx_fail(c, EM_ERR_OOM, "opcases_load", "out of memory");
        return NULL;
    }
    snprintf(s->path, sizeof s->path, "%s", json_path);
    json_error_t je;
    s->root = json_load_file(json_path, 0, &je);
    if (!s->root) {
        em_ctx_fail(c, EM_ERR_FORMAT, "opcases_load", "%s:%d: %s", json_path, je.line, je.text);
        free(s);
        return NULL;
    }
    s->cases = json_object_get(s->root, "cases");
    char bin[520];
    snprintf(bin, sizeof bin, "%.*s.bin", (int)(strlen(json_path) - 5), json_path);
    s->data = (unsigned char *)em_file_read(c, "opcases_load", bin, SIZE_MAX / 2, &s->data_len,
                                            NULL);
    if (!s->data) {
        em_opcases_free(s);
        return NULL;
    }
    if (!json_is_array(s->cases)) {
        em_ctx_fail(c, EM_ERR_FORMAT, "opcases_load", "%s: no \"cases\" array", json_path);
        em_opcases_free(s);
        return NULL;
    }
    return s;
}

void em_opcases_free(em_opcase_set *s) {
    if (!s) return;
    json_decref(s->root);
    free(s->data);
    free(s);
}

int em_opcases_count(const em_opcase_set *s) { return (int)json_array_size(s->cases); }

static const char *case_str(const em_opcase_set *s, int i, const char *key) {
    const char *v = json_string_value(json_object_get(json_array_get(s->cases, (size_t)i), key));
    return v ? v : "";
}

const char *em_opcases_name(const em_opcase_set *s, int i) { return case_str(s, i, "name"); }
const char *em_opcases_op(const em_opcase_set *s, int i) { return case_str(s, i, "op"); }

const char *em_opcases_dtype(const em_opcase_set *s, int i) {
    json_t *ins = json_object_get(json_array_get(s->cases, (size_t)i), "inputs");
    json_t *first = json_array_get(ins, 0);
    const char *d = json_string_value(json_object_get(first, "dtype"));
    return d ? d : "";
}

static bool read_shape(json_t *j, int64_t *shape, int *ndim) {
    if (!json_is_array(j) || json_array_size(j) > EM_MAX_DIMS) return false;
    *ndim = (int)json_array_size(j);
    for (int i = 0; i < *ndim; i++) shape[i] = json_integer_value(json_array_get(j, (size_t)i));
    return true;
}

/* Creates an input tensor (in the context's current scope) from its JSON description. */
static em_tensor *make_input(em_ctx *c, const em_opcase_set *s, json_t *d, em_device *dev,
                             char *why, size_t why_n, bool leaf, em_tensor **base,
                             em_dtype as) {
    em_dtype t;
    int64_t shape[EM_MAX_DIMS];
    int nd;
    size_t off = (size_t)json_integer_value(json_object_get(d, "offset"));
    size_t nb = (size_t)json_integer_value(json_object_get(d, "nbytes"));
    if (!em_dtype_parse(json_string_value(json_object_get(d, "dtype")), &t) ||
        !read_shape(json_object_get(d, "shape"), shape, &nd) || off > s->data_len ||
        nb > s->data_len - off) {
        snprintf(why, why_n, "malformed input description");
        return NULL;
    }
    em_tensor *x = em_from_host_on(c, dev, t, nd, shape, s->data + off);
    if (x && as != EM_DTYPE_AUTO && em_dtype_is_float(t) && t != as) x = em_cast(c, x, as);
    if (leaf) em_tensor_requires_grad(c, x, true); /* before the views: they pass it the grad */
    if (base) *base = x;
    json_t *views = json_object_get(d, "view");
    size_t k;
    json_t *v;
    json_array_foreach(views, k, v) {
        const char *op = json_string_value(json_object_get(v, "op"));
        if (!op) break;
        if (!strcmp(op, "permute")) {
            json_t *dims = json_object_get(v, "dims");
            int p[EM_MAX_DIMS], n = (int)json_array_size(dims);
            for (int i = 0; i < n && i < EM_MAX_DIMS; i++)
                p[i] = (int)json_integer_value(json_array_get(dims, (size_t)i));
            x = em_permute(c, x, n, p);
        } else if (!strcmp(op, "transpose")) {
            x = em_transpose(c, x, (int)json_integer_value(json_object_get(v, "dim0")),
                             (int)json_integer_value(json_object_get(v, "dim1")));
        } else if (!strcmp(op, "slice")) {
            x = em_slice(c, x, (int)json_integer_value(json_object_get(v, "dim")),
                         json_integer_value(json_object_get(v, "start")),
                         json_integer_value(json_object_get(v, "end")),
                         json_integer_value(json_object_get(v, "step")));
        } else if (!strcmp(op, "expand")) {
            int64_t sh[EM_MAX_DIMS];
            int n;
            if (!read_shape(json_object_get(v, "shape"), sh, &n)) break;
            x = em_expand(c, x, n, sh);
        } else {
            snprintf(why, why_n, "unknown view op '%s'", op);
            return NULL;
        }
    }
    return x;
}

static bool fill_attrs(const em_op_def *op, json_t *ja, em_attr *attrs, char *why, size_t n) {
    for (int i = 0; i < op->n_attrs; i++) {
        json_t *v = json_object_get(ja, op->attr_names[i]);
        em_attr *a = &attrs[i];
        memset(a, 0, sizeof *a);
        if (!v) {
            snprintf(why, n, "attribute '%s' missing in the fixture", op->attr_names[i]);
            return false;
        }
        switch (op->attr_types[i]) {
        case EM_ATTR_INT: a->i = json_integer_value(v); break;
        case EM_ATTR_BOOL: a->i = json_is_true(v); break;
        case EM_ATTR_FLOAT: a->f = json_number_value(v); break;
        case EM_ATTR_DTYPE: {
            em_dtype t;
            if (!em_dtype_parse(json_string_value(v), &t)) {
                snprintf(why, n, "attribute '%s' is not a dtype", op->attr_names[i]);
                return false;
            }
            a->i = t;
            break;
        }
        case EM_ATTR_INTS:
            if (!json_is_array(v) || json_array_size(v) > EM_ATTR_INTS_MAX) {
                snprintf(why, n, "attribute '%s' is not a short int list", op->attr_names[i]);
                return false;
            }
            a->n = (int)json_array_size(v);
            for (int k = 0; k < a->n; k++) a->v[k] = json_integer_value(json_array_get(v, (size_t)k));
            break;
        }
    }
    return true;
}

/* One unit in the last place of a value of f16 (11-bit significand, subnormals from 2^-24) or
 * bf16 (8 bits, the f32 exponent range) at b's magnitude. */
static double ulp_of(em_dtype t, double b) {
    int e;
    frexp(fabs(b), &e); /* |b| in [2^(e-1), 2^e) */
    int bits = t == EM_F16 ? 11 : 8, emin = t == EM_F16 ? -13 : -125;
    if (e - 1 < emin) e = emin + 1;
    return ldexp(1.0, e - bits);
}

/* Compares an output with its reference; fills r. */
static void compare(em_ctx *c, const em_opcase_set *s, json_t *ref, em_tensor *got, double atol,
                    double rtol, int index, em_opcase_result *r) {
    char sig[96];
    em_dtype t = EM_F32;
    int64_t shape[EM_MAX_DIMS];
    int nd = 0;
    if (!em_dtype_parse(json_string_value(json_object_get(ref, "dtype")), &t) ||
        !read_shape(json_object_get(ref, "shape"), shape, &nd)) {
        snprintf(r->msg, sizeof r->msg, "malformed reference for output %d", index);
        r->pass = false;
        return;
    }
    size_t off = (size_t)json_integer_value(json_object_get(ref, "offset"));
    if (r->compile_only) { /* what a compile-only device has: the program behind the output */
        if (em_tensor_materialize(c, got) != EM_OK) {
            snprintf(r->msg, sizeof r->msg, "output %d: %s", index, em_ctx_error(c)->message);
            r->pass = false;
            return;
        }
    }
    if (got->dtype != t || got->ndim != nd ||
        memcmp(got->shape, shape, (size_t)nd * sizeof *shape)) {
        char want[128];
        em_shape_str(shape, nd, want, sizeof want);
        snprintf(r->msg, sizeof r->msg, "output %d is %s, expected %s%s", index,
                 em_tensor_sig(got, sig, sizeof sig), em_dtype_name(t), want);
        r->pass = false;
        return;
    }
    if (r->compile_only) return; /* no values there */
    int64_t n = got->numel;
    size_t es = em_esize(t);
    if (off + (size_t)n * es > s->data_len) {
        snprintf(r->msg, sizeof r->msg, "reference data out of range");
        r->pass = false;
        return;
    }
    void *buf = malloc((size_t)(n ? n : 1) * es);
    if (!buf || em_to_host(c, got, buf, (size_t)n * es) != EM_OK) {
        snprintf(r->msg, sizeof r->msg, "cannot read output %d: %s", index,
                 em_ctx_error(c) ? em_ctx_error(c)->message : "out of memory");
        r->pass = false;
        free(buf);
        return;
    }
    const unsigned char *want = s->data + off;
    bool fl = em_dtype_is_float(t);
    /* the ulp allowance is normwise: one unit in the last place at the output's largest
     * magnitude, since a contracted a * b + c that cancels moves a small result by the rounding
     * of its larger terms */
    double ulp = 0;
    if (s->ulp_tolerant && (t == EM_F16 || t == EM_BF16)) {
        double bmax = 0;
        for (int64_t i = 0; i < n; i++) {
            double b = fabs(em_load_f64(want, t, i));
            if (isfinite(b) && b > bmax) bmax = b;
        }
        ulp = ulp_of(t, bmax);
    }
    for (int64_t i = 0; i < n; i++) {
        double a = em_load_f64(buf, t, i), b = em_load_f64(want, t, i);
        bool ok;
        if (!fl) {
            ok = a == b;
        } else if (isnan(b) || isnan(a)) {
            ok = isnan(a) && isnan(b);
        } else if (isinf(b) || isinf(a)) {
            ok = a == b;
        } else {
            double e = fabs(a - b);
            if (e > r->max_abs_err) r->max_abs_err = e;
            ok = e <= atol + rtol * fabs(b);
            if (!ok && ulp > 0) ok = e <= ulp;
        }
        if (!ok && r->pass) {
            r->pass = false;
            snprintf(r->msg, sizeof r->msg,
                     "output %d element %lld: got %.9g, expected %.9g (atol %g, rtol %g)", index,
                     (long long)i, a, b, atol, rtol);
        }
    }
    free(buf);
}

static double *read_f64(em_ctx *c, em_tensor *t);

/* topk indices that select the expected values, each index once per row. */
static bool topk_ties_ok(em_ctx *c, const em_opcase_set *s, json_t *ref0, em_tensor *x,
                         em_tensor *idx, const em_attr *attrs) {
    em_dtype t;
    if (!em_dtype_parse(json_string_value(json_object_get(ref0, "dtype")), &t)) return false;
    size_t off = (size_t)json_integer_value(json_object_get(ref0, "offset"));
    if (off + (size_t)idx->numel * em_esize(t) > s->data_len) return false;
    double *xv = read_f64(c, x), *iv = read_f64(c, idx);
    bool ok = xv && iv;
    int nd = x->ndim;
    int dim = nd ? (int)(attrs[1].i < 0 ? attrs[1].i + nd : attrs[1].i) : 0;
    int64_t k = nd ? idx->shape[dim] : 1, n = nd ? x->shape[dim] : 1;
    int64_t inner = 1;
    for (int d = dim + 1; d < nd; d++) inner *= x->shape[d];
    for (int64_t p = 0; ok && p < idx->numel; p++) {
        int64_t o = p / (k * inner), j = (p / inner) % k, q = p % inner;
        int64_t id = (int64_t)iv[p];
        if (id < 0 || id >= n) {
            ok = false;
            break;
        }
        double got = xv[(o * n + id) * inner + q], want = em_load_f64(s->data + off, t, p);
        ok = (got != got && want != want) || got == want;
        for (int64_t j2 = 0; ok && j2 < j; j2++)
            ok = (int64_t)iv[(o * k + j2) * inner + q] != id;
    }
    free(xv);
    free(iv);
    em_ctx_clear_error(c);
    return ok;
}

void em_opcases_set_tie_tolerant(em_opcase_set *s, bool on) { s->tie_tolerant = on; }
void em_opcases_set_ulp_tolerant(em_opcase_set *s, bool on) { s->ulp_tolerant = on; }

em_status em_opcases_run(em_ctx *c, const em_opcase_set *s, int i, em_device *dev,
                         em_opcase_result *r) {
    memset(r, 0, sizeof *r);
    r->pass = true;
    r->compile_only = em_device_is_compile_only(dev);
    json_t *cs = json_array_get(s->cases, (size_t)i);
    const char *opname = json_string_value(json_object_get(cs, "op"));
    const em_op_def *op = opname ? em_op_find(opname) : NULL;
    if (!op) {
        r->pass = false;
        snprintf(r->msg, sizeof r->msg, "unknown op '%s'", opname ? opname : "?");
        return EM_OK;
    }
    em_attr attrs[EM_MAX_ATTRS];
    if (!fill_attrs(op, json_object_get(cs, "attrs"), attrs, r->msg, sizeof r->msg)) {
        r->pass = false;
        return EM_OK;
    }
    em_scope_push(c);
    json_t *ins = json_object_get(cs, "inputs");
    int n_in = (int)json_array_size(ins);
    em_tensor *in[EM_MAX_INPUTS] = {NULL};
    for (int k = 0; k < n_in && k < EM_MAX_INPUTS; k++) {
        json_t *d = json_array_get(ins, (size_t)k);
        if (json_is_null(d)) continue;
        in[k] = make_input(c, s, d, dev, r->msg, sizeof r->msg, false, NULL, EM_DTYPE_AUTO);
        if (!in[k]) {
            r->pass = false;
            if (!r->msg[0])
                snprintf(r->msg, sizeof r->msg, "cannot create input %d: %s", k,
                         em_ctx_error(c) ? em_ctx_error(c)->message : "?");
            em_ctx_clear_error(c);
            em_scope_pop(c);
            return EM_OK;
        }
    }
    em_tensor *outs[EM_MAX_OUTPUTS];
    int n_out = 0;
    run_op(c, s, op, in, n_in, attrs, outs, &n_out);
    json_t *expect_err = json_object_get(cs, "error");
    if (expect_err) {
        const em_error *e = em_ctx_error(c);
        const char *want = json_string_value(json_object_get(expect_err, "status"));
        if (!e && (s->compiled || r->compile_only) && !dev->be->host_accessible) {
            /* the trace ran every shape rule, so the expected error is about values, which a
             * whole program on the device does not check (XLA clamps gathers, drops scatters),
             * nor can a compile-only device (it has no values) */
            r->not_applicable = true;
            snprintf(r->msg, sizeof r->msg, "expected an error (%s) about index values: not "
                     "checked %s on %s", want,
                     r->compile_only ? "where nothing runs" : "inside a compiled program",
                     dev->name);
        } else if (!e) {
            r->pass = false;
            snprintf(r->msg, sizeof r->msg, "expected an error (%s), the op succeeded", want);
        } else {
            if (want && strcmp(em_status_str(e->status), want)) {
                r->pass = false;
                snprintf(r->msg, sizeof r->msg, "expected %s, got: %s", want, e->message);
            }
            json_t *needles = json_object_get(expect_err, "contains");
            size_t k;
            json_t *nd;
            json_array_foreach(needles, k, nd) {
                const char *needle = json_string_value(nd);
                if (needle && !strstr(e->message, needle) && r->pass) {
                    r->pass = false;
                    snprintf(r->msg, sizeof r->msg, "error lacks \"%s\": %s", needle, e->message);
                }
            }
        }
    } else if (em_ctx_error(c)) {
        r->pass = false;
        snprintf(r->msg, sizeof r->msg, "%s", em_ctx_error(c)->message);
    } else {
        json_t *refs = json_object_get(cs, "outputs");
        double atol = json_number_value(json_object_get(cs, "atol"));
        double rtol = json_number_value(json_object_get(cs, "rtol"));
        if (op->n_out == 0) { /* in-place op: the references describe the inputs afterwards */
            for (int k = 0; k < (int)json_array_size(refs) && r->pass; k++)
                compare(c, s, json_array_get(refs, (size_t)k), in[k], atol, rtol, k, r);
        } else if ((int)json_array_size(refs) != n_out) {
            r->pass = false;
            snprintf(r->msg, sizeof r->msg, "%d outputs, expected %d", n_out,
                     (int)json_array_size(refs));
        }
        for (int k = 0; k < n_out && r->pass; k++)
            compare(c, s, json_array_get(refs, (size_t)k), outs[k], atol, rtol, k, r);
        /* topk's order among equal values is torch's libstdc++ heap/nth_element artefact on the
         * CPU; other devices may list tied elements in another order: accept indices that point
         * at the expected values (distinct in each row) when the values themselves matched. */
        if (!r->pass && !r->compile_only && op->id == EM_OP_TOPK && s->tie_tolerant && n_out == 2 &&
            !strncmp(r->msg, "output 1 ", 9) && topk_ties_ok(c, s, json_array_get(refs, 0), in[0],
                                                             outs[1], attrs)) {
            r->pass = true;
            r->msg[0] = 0;
        }
    }
    em_ctx_clear_error(c);
    em_scope_pop(c);
    return EM_OK;
}

/* ---- one device against another ---- */

/* Runs case cs on dev in the current scope; returns the number of outputs (outputs in outs, for
 * in-place ops the inputs) or -1 with r->msg set. */
static int exec_on(em_ctx *c, const em_opcase_set *s, json_t *cs, const em_op_def *op,
                   const em_attr *attrs, em_device *dev, em_tensor **outs, char *msg, size_t mn) {
    json_t *ins = json_object_get(cs, "inputs");
    int n_in = (int)json_array_size(ins);
    em_tensor *in[EM_MAX_INPUTS] = {NULL};
    for (int k = 0; k < n_in && k < EM_MAX_INPUTS; k++) {
        json_t *d = json_array_get(ins, (size_t)k);
        if (json_is_null(d)) continue;
        in[k] = make_input(c, s, d, dev, msg, mn, false, NULL, EM_DTYPE_AUTO);
        if (!in[k]) {
            if (!msg[0])
                snprintf(msg, mn, "cannot create input %d: %s", k,
                         em_ctx_error(c) ? em_ctx_error(c)->message : "?");
            return -1;
        }
    }
    int n_out = 0;
    run_op(c, s, op, in, n_in, attrs, outs, &n_out);
    if (em_ctx_error(c)) {
        snprintf(msg, mn, "%s", em_ctx_error(c)->message);
        return -1;
    }
    if (op->n_out == 0) {
        for (int k = 0; k < n_in; k++) outs[k] = in[k];
        return n_in;
    }
    return n_out;
}

static double *read_f64(em_ctx *c, em_tensor *t) {
    size_t nb = em_tensor_nbytes(t);
    void *raw = malloc(nb ? nb : 1);
    double *v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
    if (!raw || !v || em_to_host(c, t, raw, nb) != EM_OK) {
        free(raw);
        free(v);
        return NULL;
    }
    for (int64_t i = 0; i < t->numel; i++) v[i] = em_load_f64(raw, t->dtype, i);
    free(raw);
    return v;
}

em_status em_opcases_compare(em_ctx *c, const em_opcase_set *s, int i, em_device *dev,
                             em_device *ref, em_opcase_result *r, bool *ref_ran) {
    memset(r, 0, sizeof *r);
    r->pass = true;
    *ref_ran = false;
    json_t *cs = json_array_get(s->cases, (size_t)i);
    const char *opname = json_string_value(json_object_get(cs, "op"));
    const em_op_def *op = opname ? em_op_find(opname) : NULL;
    em_attr attrs[EM_MAX_ATTRS];
    if (!op || json_object_get(cs, "error") ||
        !fill_attrs(op, json_object_get(cs, "attrs"), attrs, r->msg, sizeof r->msg)) {
        r->msg[0] = 0;
        return EM_OK; /* nothing to compare */
    }
    double atol = json_number_value(json_object_get(cs, "atol"));
    double rtol = json_number_value(json_object_get(cs, "rtol"));
    em_scope_push(c);
    em_tensor *ro[EM_MAX_OUTPUTS], *dout[EM_MAX_OUTPUTS];
    char msg[600] = "";
    int nr = exec_on(c, s, cs, op, attrs, ref, ro, msg, sizeof msg);
    em_ctx_clear_error(c);
    if (nr < 0) { /* the reference cannot run it (no kernel there): nothing to compare */
        em_scope_pop(c);
        return EM_OK;
    }
    *ref_ran = true;
    int nd = exec_on(c, s, cs, op, attrs, dev, dout, r->msg, sizeof r->msg);
    if (nd < 0 || nd != nr) {
        r->pass = false;
        if (nd >= 0) snprintf(r->msg, sizeof r->msg, "%d outputs on %s, %d on %s", nd,
                              em_device_name(dev), nr, em_device_name(ref));
    }
    for (int k = 0; k < nd && r->pass; k++) {
        em_tensor *a = dout[k], *b = ro[k];
        /* topk's indices among tied values: checked against the torch reference already */
        if (op->id == EM_OP_TOPK && k == 1 && s->tie_tolerant) continue;
        if (a->dtype != b->dtype || a->ndim != b->ndim ||
            memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape)) {
            char sa[96], sb[96];
            snprintf(r->msg, sizeof r->msg, "output %d is %s on %s, %s on %s", k,
                     em_tensor_sig(a, sa, sizeof sa), em_device_name(dev),
                     em_tensor_sig(b, sb, sizeof sb), em_device_name(ref));
            r->pass = false;
            break;
        }
        double *va = read_f64(c, a), *vb = read_f64(c, b);
        if (!va || !vb) {
            snprintf(r->msg, sizeof r->msg, "cannot read output %d: %s", k,
                     em_ctx_error(c) ? em_ctx_error(c)->message : "out of memory");
            r->pass = false;
        }
        bool fl = em_dtype_is_float(a->dtype);
        /* the normwise ulp allowance of compare(), at the reference device's largest value */
        double ulp = 0;
        if (va && vb && s->ulp_tolerant && (a->dtype == EM_F16 || a->dtype == EM_BF16)) {
            double ymax = 0;
            for (int64_t j = 0; j < b->numel; j++)
                if (isfinite(vb[j]) && fabs(vb[j]) > ymax) ymax = fabs(vb[j]);
            ulp = ulp_of(a->dtype, ymax);
        }
        for (int64_t j = 0; r->pass && j < a->numel; j++) {
            double x = va[j], y = vb[j];
            bool ok;
            if (!fl) ok = x == y;
            else if (isnan(x) || isnan(y)) ok = isnan(x) && isnan(y);
            else if (isinf(x) || isinf(y)) ok = x == y;
            else {
                double e = fabs(x - y);
                if (e > r->max_abs_err) r->max_abs_err = e;
                /* both sit within tol of the reference, so within twice of each other */
                ok = e <= 2 * (atol + rtol * fabs(y)) || (ulp > 0 && e <= 2 * ulp);
            }
            if (!ok) {
                r->pass = false;
                snprintf(r->msg, sizeof r->msg,
                         "output %d element %lld: %.9g on %s, %.9g on %s (atol %g, rtol %g)", k,
                         (long long)j, x, em_device_name(dev), y, em_device_name(ref), atol, rtol);
            }
        }
        free(va);
        free(vb);
    }
    em_ctx_clear_error(c);
    em_scope_pop(c);
    return EM_OK;
}

/* ---- access for other runners (the gradient cases) ---- */

static json_t *case_key(const em_opcase_set *s, int i, const char *key) {
    return json_object_get(json_array_get(s->cases, (size_t)i), key);
}

int em_opcases_len(const em_opcase_set *s, int i, const char *key) {
    return (int)json_array_size(case_key(s, i, key));
}

const char *em_opcases_string(const em_opcase_set *s, int i, const char *key) {
    return case_str(s, i, key);
}

long long em_opcases_int_at(const em_opcase_set *s, int i, const char *key, int k,
                            long long def) {
    json_t *v = json_array_get(case_key(s, i, key), (size_t)k);
    return json_is_integer(v) ? json_integer_value(v) : def;
}

double em_opcases_number(const em_opcase_set *s, int i, const char *key, double def) {
    json_t *v = case_key(s, i, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

em_tensor *em_opcases_tensor(em_ctx *c, const em_opcase_set *s, int i, const char *key, int k,
                             em_device *dev, bool leaf, em_tensor **base, em_dtype as,
                             char *why, size_t why_n) {
    if (base) *base = NULL;
    json_t *d = json_array_get(case_key(s, i, key), (size_t)k);
    if (!d || json_is_null(d)) return NULL;
    return make_input(c, s, d, dev, why, why_n, leaf, base, as);
}

bool em_opcases_attrs(const em_opcase_set *s, int i, const em_op_def *op, em_attr *attrs,
                      char *why, size_t why_n) {
    return fill_attrs(op, case_key(s, i, "attrs"), attrs, why, why_n);
}

void em_opcases_check(em_ctx *c, const em_opcase_set *s, int i, const char *key, int k,
                      em_tensor *got, double atol, double rtol, em_opcase_result *r) {
    compare(c, s, json_array_get(case_key(s, i, key), (size_t)k), got, atol, rtol, k, r);
}
