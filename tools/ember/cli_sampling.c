/* The sampling options `ember generate` and `ember chat` share. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

bool cli_sampling_arg(cli_sampling *s, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "--greedy")) return s->greedy = true;
    static const char *const names[] = {"--temperature", "--top-k", "--top-p", "--min-p",
                                        "--seed", "--repetition-penalty"};
    for (int k = 0; k < 6; k++) {
        if (strcmp(a, names[k]) || *i + 1 >= argc) continue;
        const char *v = argv[++*i];
        switch (k) {
        case 0: s->temperature = atof(v); break;
        case 1: s->top_k = atoll(v); break;
        case 2: s->top_p = atof(v); break;
        case 3: s->min_p = atof(v); break;
        case 4: s->seed = atoll(v); break;
        default: s->rep = atof(v); break;
        }
        return s->have[k] = true;
    }
    return false;
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
