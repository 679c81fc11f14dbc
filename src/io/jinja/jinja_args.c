/* Chat templates: binding call arguments to the parameters of builtins the way Python does, and
 * small conversions builtins share. */
#include <string.h>

#include "io/jinja/jinja.h"

void jrt_args_bind(jrt *rt, const jnode *at, const char *fname, jargs *a, const char *const *params,
                int nparams, int nrequired, jv *out, bool *given) {
    for (int k = 0; k < nparams; k++) {
        out[k] = jv_undef();
        given[k] = false;
    }
    if (a->npos > nparams)
        jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                 "TypeError: %s() takes at most %d argument%s (%d given)", fname, nparams,
                 nparams == 1 ? "" : "s", a->npos);
    for (int k = 0; k < a->npos; k++) {
        out[k] = a->pos[k];
        given[k] = true;
    }
    for (int q = 0; q < a->nkw; q++) {
        int k = 0;
        while (k < nparams && strcmp(params[k], a->kwn[q])) k++;
        if (k == nparams)
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "TypeError: %s() got an unexpected keyword argument '%s'", fname, a->kwn[q]);
        if (given[k])
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "TypeError: %s() got multiple values for argument '%s'", fname, params[k]);
        out[k] = a->kwv[q];
        given[k] = true;
    }
    for (int k = 0; k < nrequired; k++)
        if (!given[k])
            jrt_fail(rt, at, EM_ERR_INVALID_ARG,
                     "TypeError: %s() missing required argument '%s'", fname, params[k]);
}

jstr *jrt_arg_str(jrt *rt, const jnode *at, const char *fname, jv v) {
    if (v.k == JV_STR) return v.s;
    if (v.k == JV_UNDEF) jv_raise_undefined(rt, at, v);
    jrt_fail(rt, at, EM_ERR_INVALID_ARG, "TypeError: %s() argument must be str, not %s", fname,
             jv_typename(v));
}

int64_t jrt_arg_int(jrt *rt, const jnode *at, const char *fname, jv v) {
    if (v.k == JV_INT) return v.i;
    if (v.k == JV_BOOL) return v.b;
    if (v.k == JV_UNDEF) jv_raise_undefined(rt, at, v);
    jrt_fail(rt, at, EM_ERR_INVALID_ARG,
             "TypeError: %s(): '%s' object cannot be interpreted as an integer", fname,
             jv_typename(v));
}

jv jv_str_result(jrt *rt, jbuf *b, bool markup) {
    (void)rt;
    jv r = jv_str_buf(b);
    r.markup = markup;
    return r;
}
