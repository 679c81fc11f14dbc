/* Runs the op cases of one fixture family (tests/fixtures/ops/<family>.json) on the CPU and
 * reports every failure with the case name, op and message. Usage: test_ops FAMILY [FILTER] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "testing/op_cases.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_ops FAMILY [FILTER]\n");
        return 2;
    }
    if (!em_test_check_kernels()) return 1;
    char path[1024];
    snprintf(path, sizeof path, "%s/ops/%s.json", em_test_fixtures_dir(), argv[1]);
    em_ctx *c = em_ctx_create();
    em_opcase_set *s = em_opcases_load(c, path);
    if (!s) {
        fprintf(stderr, "%s\n", em_ctx_error(c)->message);
        em_ctx_free(c);
        return 1;
    }
    const char *cm = getenv("EMBER_TEST_COMPILE");
    bool compiled = cm && *cm && strcmp(cm, "0");
    em_opcases_set_compiled(s, compiled);
    int n = em_opcases_count(s), ran = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        const char *name = em_opcases_name(s, i);
        if (argc > 2 && !strstr(name, argv[2])) continue;
        em_opcase_result r;
        em_opcases_run(c, s, i, em_device_cpu(), &r);
        ran++;
        if (!r.pass) {
            failed++;
            fprintf(stderr, "FAIL %s (op %s): %s\n", name, em_opcases_op(s, i), r.msg);
        }
    }
    fprintf(stderr, "%s [%s]: %d cases, %d failed\n", argv[1],
            compiled ? "compiled" : em_eager_mode_name(em_ctx_eager_mode(c)), ran, failed);
    em_opcases_free(s);
    em_ctx_free(c);
    return failed || ran == 0 ? 1 : 0;
}
