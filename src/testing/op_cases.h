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

/*
 * Runs case i on `dev` and on `ref` (e.g. the CPU backend) and compares their outputs with the
 * case's tolerance (twice it: each is within it of the torch reference). Cases that expect an
 * error compare nothing. *ref_ran is false when `ref` could not run the case (no kernel there);
 * then nothing is compared and r->pass stays true.
 */
em_status em_opcases_compare(em_ctx *c, const em_opcase_set *s, int i, em_device *dev,
                             em_device *ref, em_opcase_result *r, bool *ref_ran);

#endif
