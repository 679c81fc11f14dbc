/*
 * The beta distribution's quantile function, for the schedulers' use_beta_sigmas (diffusers
 * calls scipy.stats.beta.ppf(1 - linspace(0, 1, n), 0.6, 0.6)). No Debian library with a
 * compatible licence has it (GSL's gsl_cdf_beta_Pinv is GPL; Boost's ibeta_inv is C++), and the
 * schedulers need only a few dozen quantiles per set_timesteps, so it is computed here: the
 * regularized incomplete beta I_x(a, b) by its continued fraction (DLMF 8.17.22, evaluated with
 * the modified Lentz method), inverted by Newton steps kept inside a bisection bracket.
 */
#include <math.h>

#include "diffusion/sched_impl.h"

/* the continued fraction of I_x(a, b) x^-a (1-x)^-b a B(a, b), converging for x < (a+1)/(a+b+2) */
static double beta_cf(double x, double a, double b) {
    const double tiny = 1e-300;
    double qab = a + b, qap = a + 1, qam = a - 1;
    double c = 1, d = 1 - qab * x / qap;
    if (fabs(d) < tiny) d = tiny;
    d = 1 / d;
    double h = d;
    for (int m = 1; m <= 500; m++) {
        double m2 = 2.0 * m;
        double aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1 + aa * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1 + aa / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        h *= d * c;
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1 + aa * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1 + aa / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-16) break;
    }
    return h;
}

static double log_beta(double a, double b) { return lgamma(a) + lgamma(b) - lgamma(a + b); }

/* I_x(a, b), the beta distribution's CDF */
static double beta_cdf(double x, double a, double b) {
    if (x <= 0) return 0;
    if (x >= 1) return 1;
    double front = exp(a * log(x) + b * log1p(-x) - log_beta(a, b));
    if (x < (a + 1) / (a + b + 2)) return front * beta_cf(x, a, b) / a;
    return 1 - front * beta_cf(1 - x, b, a) / b;
}

double em_beta_ppf(double p, double a, double b) {
    if (!(a > 0) || !(b > 0) || !(p >= 0 && p <= 1)) return NAN;
    if (p == 0) return 0;
    if (p == 1) return 1;
    double lo = 0, hi = 1, x = 0.5, lb = log_beta(a, b);
    for (int it = 0; it < 200; it++) {
        double f = beta_cdf(x, a, b) - p;
        if (f == 0) return x;
        if (f < 0) lo = x;
        else hi = x;
        /* Newton with the density; a step that leaves the bracket (the density is unbounded at
         * an end for a or b < 1) becomes a bisection */
        double pdf = exp((a - 1) * log(x) + (b - 1) * log1p(-x) - lb);
        double nx = x - f / pdf;
        if (!(nx > lo && nx < hi) || !isfinite(nx)) nx = 0.5 * (lo + hi);
        if (fabs(nx - x) <= 1e-17 * (x > 1e-300 ? x : 1e-300) || hi - lo <= 4e-16 * hi) return nx;
        x = nx;
    }
    return x;
}
