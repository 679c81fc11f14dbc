/* The sampling options `ember generate` and `ember chat` share. */
#include <float.h>
#include <limits.h>
#include <string.h>

#include "cli.h"

int cli_sampling_arg(const char *cmd, cli_sampling *s, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "--greedy")) return s->greedy = true;
    static const char *const names[] = {"--temperature", "--top-k", "--top-p", "--min-p",
                                        "--seed", "--repetition-penalty"};
    for (int k = 0; k < 6; k++) {
        if (strcmp(a, names[k]) || *i + 1 >= argc) continue;
        const char *v = argv[++*i];
        bool ok;
        switch (k) {
        case 0: ok = cli_real(cmd, a, v, 0, DBL_MAX, &s->temperature); break;
        case 1: ok = cli_int(cmd, a, v, 0, LLONG_MAX, &s->top_k); break;
        case 2: ok = cli_real(cmd, a, v, 0, 1, &s->top_p); break;
        case 3: ok = cli_real(cmd, a, v, 0, 1, &s->min_p); break;
        case 4: ok = cli_int(cmd, a, v, 0, LLONG_MAX, &s->seed); break;
        default: ok = cli_real(cmd, a, v, 0, DBL_MAX, &s->rep); break;
        }
        if (!ok) return -1;
        s->have[k] = true;
        return 1;
    }
    return 0;
}

void cli_sampling_apply(const cli_sampling *s, em_generate_params *p) {
    if (s->greedy) p->do_sample = false;
    if (s->have[0] || s->have[1] || s->have[2] || s->have[3]) p->do_sample = !s->greedy;
    if (s->have[0]) p->temperature = s->temperature;
    if (s->have[1]) p->top_k = s->top_k;
    if (s->have[2]) p->top_p = s->top_p;
    if (s->have[3]) p->min_p = s->min_p;
    if (s->have[4]) p->seed = (uint64_t)s->seed;
    if (s->have[5]) p->repetition_penalty = s->rep;
}
