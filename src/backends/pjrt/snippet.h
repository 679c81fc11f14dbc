/*
 * StableHLO snippets: kernels of kernel-hub packages (variant ember-stablehlo) that PJRT devices
 * compile. The kernel hub (src/kernels_hub/stablehlo.c) reads and verifies a package's snippet
 * files and registers each as an implementation in the kernel registry for kind "pjrt" or
 * "pjrt:<platform>", with run = pj_snippet_run, supports = pj_snippet_supports and user = the
 * pj_snippet. Eager calls that pick it run the op's program with the snippet in place of the
 * built-in emitter; the whole-program lowering (compile mode) asks the registry too and calls
 * the snippet where it wins.
 *
 * A snippet is the text of one MLIR function, the op's body:
 *
 *   func.func private @{{name}}(%a: {{in0}}, %b: {{in1}}) -> {{out0}} { ... }
 *
 * instantiated per call by replacing placeholders:
 *   {{name}}                the function's symbol (unique in the module)
 *   {{inI}} {{outI}}        input / output I's tensor type, "tensor<4x8xbf16>"
 *   {{inI.elem}}            its element type, "bf16" (also outI)
 *   {{inI.dJ}}              its dimension J (also outI)
 *   {{attr.NAME}}           the op attribute NAME as an integer (bools 0 / 1)
 * An integer placeholder may end in +N or -N ({{in1.d0-1}}, {{attr.rhs_nk+1}}). Inputs arrive
 * in their logical shapes and dtypes (views made contiguous in the program); the result must be
 * the output's type. Any other {{...}} is an error naming it and the file.
 */
#ifndef EMBER_PJRT_SNIPPET_H
#define EMBER_PJRT_SNIPPET_H

#include "core/kernel_registry.h"

#define PJ_SNIPPET_MAX_ATTRS 4

/* Which calls a snippet takes (beyond its dtypes and modes): input ranks and attribute values. */
typedef struct pj_snippet_when {
    int n_ranks;                  /* 0: any ranks */
    int ranks[EM_MAX_INPUTS];     /* rank of input i, -1: any */
    int n_attrs;
    int attr[PJ_SNIPPET_MAX_ATTRS]; /* index into the op's attributes */
    int64_t value[PJ_SNIPPET_MAX_ATTRS];
} pj_snippet_when;

typedef struct pj_snippet {
    char sym[48];      /* symbol prefix, e.g. "ragged_dot_gather" */
    char file[300];    /* "build/ember-stablehlo/ragged_dot_gather.mlir", for messages */
    char digest[65];   /* sha256 of text: part of the program's cache key */
    char *text;        /* the template, NUL-terminated (lives until exit) */
    pj_snippet_when when;
} pj_snippet;

/* Expands s for the given types (n_in inputs, NULL for absent ones; n_out outputs) and attrs
 * under symbol `fn`: malloc'd text, or NULL with the reason in why. */
char *pj_snippet_expand(const pj_snippet *s, const char *fn, const em_op_def *op,
                        const em_attr *attrs, const em_tensor *const *in, int n_in,
                        const em_meta *out, int n_out, char *why, size_t why_n);

/* The registry hooks of a snippet implementation (user: its pj_snippet). A snippet that does not
 * expand or compile is disabled with a message at its first call, which goes to the next
 * implementation (the built-in last). */
em_status pj_snippet_run(const em_kimpl *k, const em_kernel_args *a);
bool pj_snippet_supports(const em_kimpl *k, const em_kernel_args *a, unsigned mode);

/* The whole-program lowering's question (compile mode): the snippet implementation the registry
 * picks for this call on backend be, or NULL when another one (the built-in) wins. a->out may
 * be NULL (n_out 0): snippets' supports reads inputs and attributes only. */
const em_kimpl *pj_snippet_pick(const em_backend *be, const em_kernel_args *a);
/* Emits k's snippet for the op of e (its inputs, attributes and output metas set); one that does
 * not expand is disabled with a message and `builtin` emits the op instead. (A whole program
 * the plugin then fails to compile fails the compile, naming the error.) */
typedef struct pj_emit pj_emit;
typedef em_status (*pj_emit_fn)(pj_emit *e);
em_status pj_snippet_emit(pj_emit *e, const em_kimpl *k, pj_emit_fn builtin);

#endif
