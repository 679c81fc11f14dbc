/* Strict parsing of the numbers given to command-line options: the whole value must be a number
 * in range, else the command fails naming the option (atoi would read "abc" as 0 and "1x" as 1). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

bool cli_int(const char *cmd, const char *opt, const char *text, long long lo, long long hi,
             long long *out) {
    char *end = NULL;
    errno = 0;
    long long v = text && *text ? strtoll(text, &end, 10) : 0;
    if (!text || !*text || *end) {
        fprintf(stderr, "ember %s: %s expects an integer, got '%s'\n", cmd, opt, text ? text : "");
        return false;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        if (errno != ERANGE && v < lo)
            fprintf(stderr, "ember %s: %s must be at least %lld, got %s\n", cmd, opt, lo, text);
        else
            fprintf(stderr, "ember %s: %s must be at most %lld, got %s\n", cmd, opt, hi, text);
        return false;
    }
    *out = v;
    return true;
}

bool cli_real(const char *cmd, const char *opt, const char *text, double lo, double hi,
              double *out) {
    char *end = NULL;
    double v = text && *text ? strtod(text, &end) : 0;
    if (!text || !*text || *end || !isfinite(v)) {
        fprintf(stderr, "ember %s: %s expects a number, got '%s'\n", cmd, opt, text ? text : "");
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "ember %s: %s must be %s %g, got %s\n", cmd, opt,
                v < lo ? "at least" : "at most", v < lo ? lo : hi, text);
        return false;
    }
    *out = v;
    return true;
}

int cli_int_list(const char *cmd, const char *opt, const char *text, long long lo, long long hi,
                 long long *out, int max) {
    int n = 0;
    const char *s = text ? text : "";
    char item[32];
    while (*s) {
        size_t k = 0;
        while (s[k] && s[k] != ',') k++;
        if (n == max || k == 0 || k >= sizeof item) {
            fprintf(stderr, "ember %s: %s expects a list of at most %d integers like 1,16, got "
                            "'%s'\n", cmd, opt, max, text ? text : "");
            return -1;
        }
        snprintf(item, sizeof item, "%.*s", (int)k, s);
        if (!cli_int(cmd, opt, item, lo, hi, &out[n++])) return -1;
        s += k + (s[k] == ',');
    }
    if (!n) {
        fprintf(stderr, "ember %s: %s expects a list of integers like 1,16\n", cmd, opt);
        return -1;
    }
    return n;
}
