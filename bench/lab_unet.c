/*
 * Lab timing of a UNet's forward (not a test; run by hand, under perf for a profile):
 *
 *   lab_unet UNET_DIR [SIZE] [REPEATS] [DEVICE] [bf16|f16|f32] [ab]
 *
 * Loads the component folder (config.json + diffusion_pytorch_model.safetensors) and runs the
 * forward on SIZE x SIZE latents (default: the config's sample_size) at timestep 500, REPEATS
 * times (default 5) after one warm-up, printing each wall and CPU time (and the page faults it
 * took) and the best. A UNet2DModel gets one [1, C, SIZE, SIZE] sample; a
 * UNet2DConditionModel (SD 1.5) the bench's classifier-free-guidance batch, [2, C, SIZE, SIZE]
 * and 77 random text states. DEVICE "-": the context's default. `ab`: the repeats alternate
 * conv2d's panel gathering as it was before the conv-pack change (EMBER_CONV_GATHER=rows: "old")
 * and as it is ("new"); the best of each and their ratio are printed. bench/lab_unet_model.py
 * makes a UNet2DModel folder (random weights); the profile of a 64x64 UNet made with them:
 * docs/notes/2026-12-02-unet-profile.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "ember/ember.h"

static double clock_of(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static long minor_faults(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: lab_unet UNET_DIR [SIZE] [REPEATS] [DEVICE] [bf16|f16|f32] [ab]\n");
        return 2;
    }
    em_ctx *c = em_ctx_create();
    em_unet2d_options o = em_unet2d_default_options();
    o.device = argc > 4 && strcmp(argv[4], "-") ? argv[4] : NULL;
    if (argc > 5)
        o.dtype = !strcmp(argv[5], "bf16") ? EM_BF16 : !strcmp(argv[5], "f16") ? EM_F16 : EM_F32;
    const bool ab = argc > 6 && !strcmp(argv[6], "ab");
    em_unet2d *u = em_unet2d_load(c, argv[1], &o);
    if (!u) {
        fprintf(stderr, "%s\n", em_ctx_error(c)->message);
        em_ctx_free(c);
        return 1;
    }
    const em_unet2d_config *cfg = em_unet2d_get_config(u);
    int64_t size = argc > 2 ? atoll(argv[2]) : cfg->sample_size[0];
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    const bool cond = cfg->cross_attention_dim > 0;
    const int64_t n = cond ? 2 : 1;
    em_ctx_set_device(c, em_unet2d_device(u));
    em_tensor *x = em_cast(
        c, em_randn(c, EM_F32, EM_SHAPE(n, cfg->in_channels, size, size), 1, 0.0, 1.0), o.dtype);
    em_tensor *ehs =
        cond ? em_cast(c, em_randn(c, EM_F32, EM_SHAPE(n, 77, cfg->cross_attention_dim), 2, 0.0,
                                   1.0),
                       o.dtype)
             : NULL;
    em_tensor *t = em_scalar(c, 500.0, EM_F32);
    double best[2] = {1e30, 1e30}, best_cpu[2] = {1e30, 1e30};
    for (int r = ab ? -2 : -1; r < reps; r++) {
        const int v = ab ? (r + 2) % 2 : 1; /* 0: old, 1: new */
        if (ab && v == 0)
            setenv("EMBER_CONV_GATHER", "rows", 1);
        else if (ab)
            unsetenv("EMBER_CONV_GATHER");
        em_scope_push(c);
        double t0 = clock_of(CLOCK_MONOTONIC), c0 = clock_of(CLOCK_PROCESS_CPUTIME_ID);
        long f0 = minor_faults();
        em_tensor *y = cond ? em_unet2d_forward_cond(c, u, x, t, ehs)
                            : em_unet2d_forward(c, u, x, t, NULL);
        float probe;
        /* reading one value waits for the whole forward */
        em_to_host_f32(c, em_slice(c, em_reshape(c, y, 1, (int64_t[]){-1}), 0, 0, 1, 1), &probe, 1);
        double dt = clock_of(CLOCK_MONOTONIC) - t0, dc = clock_of(CLOCK_PROCESS_CPUTIME_ID) - c0;
        em_scope_pop(c);
        if (em_ctx_status(c)) {
            fprintf(stderr, "%s\n", em_ctx_error(c)->message);
            break;
        }
        if (r >= 0) {
            printf("forward %d%s: %.3f s, %.3f CPU-s, %ld page faults\n", r,
                   ab ? (v ? " new" : " old") : "", dt, dc, minor_faults() - f0);
            fflush(stdout);
            if (dt < best[v]) best[v] = dt;
            if (dc < best_cpu[v]) best_cpu[v] = dc;
        }
    }
    printf("UNet2D%s %s, %lldx%lld, %s on %s, %d threads: best %.3f s, %.3f CPU-s\n",
           cond ? "ConditionModel" : "Model", argv[1], (long long)size, (long long)size,
           em_dtype_name(o.dtype), em_device_name(em_unet2d_device(u)), em_num_threads(), best[1],
           best_cpu[1]);
    if (ab)
        printf("old: best %.3f s, %.3f CPU-s; old / new: %.3fx wall, %.3fx CPU\n", best[0],
               best_cpu[0], best[0] / best[1], best_cpu[0] / best_cpu[1]);
    em_unet2d_free(u);
    em_ctx_free(c);
    return 0;
}
