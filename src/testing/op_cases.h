/*
 * Op test cases from committed fixtures (scripts/gen_op_fixtures.py writes them with torch and
 * numpy): each case names an op of the op table, its attributes, input tensors (optionally made
 * into strided views) and the reference outputs, with a tolerance. The same runner serves the
 * test suite and `ember test-devices`, which runs every case on every device.
 *
 * File format: <name>.json (cases) next to <name>.bin (raw little-endian tensor data, each
 * tensor at the "offset" its JSON entry gives).
 */
#ifndef EMBER_OP_CASES_H
#define EMBER_OP_CASES_H

#include "ember/ember.h"
#include "core/op_table.h"

typedef struct em_opcase_set em_opcase_set;

/* Loads a fixture file; NULL with an error recorded in c. Free with em_opcases_free. */
em_opcase_set *em_opcases_load(em_ctx *c, const char *json_path);
void em_opcases_free(em_opcase_set *s);
int em_opcases_count(const em_opcase_set *s);
const char *em_opcases_name(const em_opcase_set *s, int i);
const char *em_opcases_op(const em_opcase_set *s, int i);
const char *em_opcases_dtype(const em_opcase_set *s, int i); /* first input's dtype, or "" */

typedef struct em_opcase_result {
    bool pass;
    /* compiled on a device whose programs cannot check data (PJRT): a case expecting an error
     * about index or group-size VALUES that the trace (the shape rules) accepted. Counted
     * apart; pass stays true. */
    bool not_applicable;
    /* the device compiles programs but runs none (a compile-only PJRT device, tpu-aot:...):
     * pass means the case's programs compiled and its outputs have the reference's shapes and
     * dtypes; values were not compared (execution is not applicable there) */
    bool compile_only;
    double max_abs_err;
    char msg[1800];
} em_opcase_result;

/*
 * Runs case i on `dev` (inputs are created there) and compares with the reference. The context's
 * error state is cleared before returning (a case that expects an error checks it). Returns
 * EM_OK when the case could be run (whether it passed is in r->pass).
 */
em_status em_opcases_run(em_ctx *c, const em_opcase_set *s, int i, em_device *dev,
                         em_opcase_result *r);

/* Runs each case's op call as a compiled function (ember/compile.h): traced, lowered for the
 * device (a CPU plan or one PJRT program) and run. In-place ops write into a captured tensor. */
void em_opcases_set_compiled(em_opcase_set *s, bool on);

/* Accept topk indices that list tied values in another order than torch's CPU (see
 * em_opcases_run); used for devices other than the CPU. */
void em_opcases_set_tie_tolerant(em_opcase_set *s, bool on);

/* Also accept f16 and bf16 outputs within one unit in the last place at the largest magnitude
 * of the reference output (a normwise bound), where the case's tolerance is tighter: torch
 * rounds after every op, and a device compiler may not (XLA's CPU plugin on a CPU with
 * AVX512-FP16 moved four f16 rope cases by 1-3 ulp of their results, most likely by f16
 * arithmetic with contracted multiply-adds; docs/pjrt.md). For devices other than the CPU,
 * whose kernels keep torch's rounding. */
void em_opcases_set_ulp_tolerant(em_opcase_set *s, bool on);

/*
 * Runs case i on `dev` and on `ref` (e.g. the CPU backend) and compares their outputs with the
 * case's tolerance (twice it: each is within it of the torch reference). Cases that expect an
 * error compare nothing. *ref_ran is false when `ref` could not run the case (no kernel there);
 * then nothing is compared and r->pass stays true.
 */
em_status em_opcases_compare(em_ctx *c, const em_opcase_set *s, int i, em_device *dev,
                             em_device *ref, em_opcase_result *r, bool *ref_ran);

/* What em_opcases_run_isolated reports per case, in the parent, in the cases' order. */
typedef void (*em_opcase_sink)(void *user, int i, const em_opcase_result *r);

/*
 * Runs cases idx[0..n) of s on dev as em_opcases_run does, but in a child process (fork), and
 * gives each result to sink. A child that dies (a signal from a crashing compiler) costs only
 * the case it was running: that case is reported as failed with the signal, and a new child
 * goes on with the next one. For compile-only devices, whose cases produce no values to send
 * back; the parent must not have run anything on dev (the children inherit no threads).
 * stats (may be NULL) gets the children's executable cache statistics added (a crashed child's
 * are lost); *crashes (may be NULL) the number of children that died. EM_ERR_IO when a pipe or
 * a process cannot be made.
 */
em_status em_opcases_run_isolated(em_ctx *c, const em_opcase_set *s, const int *idx, int n,
                                  em_device *dev, em_opcase_sink sink, void *user,
                                  em_pjrt_cache_stats *stats, int *crashes);

/* ---- pieces of a case, for runners of other kinds of cases (tests/test_grad.c reads the
 * gradient cases of scripts/gen_grad_fixtures.py, stored in the same format) ---- */
/* Entries of the case's array `key` ("inputs", "outputs", "grads", ...); 0 when absent. */
int em_opcases_len(const em_opcase_set *s, int i, const char *key);
/* A string / number member of the case ("" / def when absent). */
const char *em_opcases_string(const em_opcase_set *s, int i, const char *key);
double em_opcases_number(const em_opcase_set *s, int i, const char *key, double def);
/* Integer k of the case's array `key` (def when absent or not an integer). */
long long em_opcases_int_at(const em_opcase_set *s, int i, const char *key, int k,
                            long long def);
/* Tensor k of the case's array `key` on dev, in the current scope: NULL for a JSON null (why
 * empty) or with why filled. leaf: the stored tensor is marked to require grad before its view
 * ops run (so they are recorded and pass it the gradient); *base (may be NULL) gets it. A floating
 * stored tensor is converted to `as` first unless it is EM_DTYPE_AUTO. */
em_tensor *em_opcases_tensor(em_ctx *c, const em_opcase_set *s, int i, const char *key, int k,
                             em_device *dev, bool leaf, em_tensor **base, em_dtype as,
                             char *why, size_t why_n);
/* The case's attributes for op (false with why filled when one is missing or malformed). */
bool em_opcases_attrs(const em_opcase_set *s, int i, const em_op_def *op, em_attr *attrs,
                      char *why, size_t why_n);
/* Compares got with tensor k of the case's array `key` (dtype, shape, values within atol +
 * rtol * |want|); a mismatch sets r->pass false and r->msg (r must be initialised). */
void em_opcases_check(em_ctx *c, const em_opcase_set *s, int i, const char *key, int k,
                      em_tensor *got, double atol, double rtol, em_opcase_result *r);

#endif
