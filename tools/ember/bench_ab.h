/* Kernel packages against the built-ins in one process (`ember bench moe|attention --kernels`). */
#ifndef EMBER_BENCH_AB_H
#define EMBER_BENCH_AB_H

#include <stdbool.h>

/* Loads each comma-separated spec; false (said on stderr, naming `who`) when one does not load. */
bool bench_load_packages(const char *who, const char *specs);

/* `rounds` rounds (at most 16), each timing turn(user) — which returns its ms — once with the
 * packages suspended (em_kreg_suspend_packages: the built-ins) and once with them, which side
 * goes first alternating; the medians over the rounds in *builtin and *hub, and (ratio not NULL)
 * the median of the rounds' hub/built-in ratios: each round's two turns are adjacent in time, so
 * a neighbour's burst that slows both cancels out of it. Leaves the packages suspended. */
void bench_ab_rounds(double (*turn)(void *user), void *user, int rounds, double *builtin,
                     double *hub, double *ratio);

#endif
