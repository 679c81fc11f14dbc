#include "harness.h"

#include <stdlib.h>

#include "ember/ember.h"

int em_test_failures;
int em_test_checks;

void em_test_check_err(void *ctx, int status, const char *file, int line, const char **needles) {
    em_ctx *c = ctx;
    em_test_checks++;
    const em_error *e = em_ctx_error(c);
    if (!e) {
        em_test_failures++;
        fprintf(stderr, "%s:%d: expected an error (%s), got none\n", file, line,
                em_status_str((em_status)status));
        return;
    }
    if ((int)e->status != status) {
        em_test_failures++;
        fprintf(stderr, "%s:%d: expected %s, got: %s\n", file, line,
                em_status_str((em_status)status), e->message);
    }
    for (const char **n = needles; *n; n++)
        if (!strstr(e->message, *n)) {
            em_test_failures++;
            fprintf(stderr, "%s:%d: error message lacks \"%s\": %s\n", file, line, *n, e->message);
        }
    em_ctx_clear_error(c);
}

const char *em_test_fixtures_dir(void) {
    const char *d = getenv("EMBER_FIXTURES");
    return d && *d ? d : "tests/fixtures";
}

int em_test_run(const em_test_case *tests, int n, int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    for (int i = 0; i < n; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        int before = em_test_failures;
        tests[i].fn();
        ran++;
        fprintf(stderr, "%-40s %s\n", tests[i].name, em_test_failures == before ? "ok" : "FAILED");
    }
    fprintf(stderr, "%d tests, %d checks, %d failures\n", ran, em_test_checks, em_test_failures);
    return em_test_failures ? 1 : 0;
}
