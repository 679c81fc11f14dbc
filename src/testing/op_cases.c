/* Op test cases from committed torch/numpy fixtures (see op_cases.h). */
#include "testing/op_cases.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_impl.h"
#include "ops/op_table.h"

struct em_opcase_set {
    json_t *root;
    json_t *cases;
    unsigned char *data;
    size_t data_len;
    char path[512];
};

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return NULL;
    }
    long n = ftell(f);
    rewind(f);
    unsigned char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) *len = (size_t)n;
    return buf;
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
    s->data = read_file(bin, &s->data_len);
    if (!json_is_array(s->cases) || !s->data) {
        em_ctx_fail(c, EM_ERR_FORMAT, "opcases_load", "%s: no \"cases\" array or no %s",
                    json_path, bin);
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
                             char *why, size_t why_n) {
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
    if (got->dtype != t || got->ndim != nd ||
        memcmp(got->shape, shape, (size_t)nd * sizeof *shape)) {
        char want[128];
        em_shape_str(shape, nd, want, sizeof want);
        snprintf(r->msg, sizeof r->msg, "output %d is %s, expected %s%s", index,
                 em_tensor_sig(got, sig, sizeof sig), em_dtype_name(t), want);
        r->pass = false;
        return;
    }
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

em_status em_opcases_run(em_ctx *c, const em_opcase_set *s, int i, em_device *dev,
                         em_opcase_result *r) {
    memset(r, 0, sizeof *r);
    r->pass = true;
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
        in[k] = make_input(c, s, d, dev, r->msg, sizeof r->msg);
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
    em_op_run(c, __FILE__, __LINE__, op->id, in, n_in, attrs, outs, EM_MAX_OUTPUTS, &n_out);
    json_t *expect_err = json_object_get(cs, "error");
    if (expect_err) {
        const em_error *e = em_ctx_error(c);
        const char *want = json_string_value(json_object_get(expect_err, "status"));
        if (!e) {
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
    }
    em_ctx_clear_error(c);
    em_scope_pop(c);
    return EM_OK;
}
