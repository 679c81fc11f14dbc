/*
 * Lab timing of UNet2DModel's forward (not a test; run by hand, under perf for a profile):
 *
 *   lab_unet UNET_DIR [SIZE] [REPEATS] [DEVICE]
 *
 * Loads the component folder (config.json + diffusion_pytorch_model.safetensors) and runs the
 * forward on a [1, C, SIZE, SIZE] sample (default: the config's sample_size) at timestep 500,
 * REPEATS times (default 5) after one warm-up, printing each wall time and the best.
 * bench/lab_unet_model.py makes such a folder (random weights); the profile of a 64x64 UNet
 * made with them: docs/notes/2026-12-02-unet-profile.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ember/ember.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: lab_unet UNET_DIR [SIZE] [REPEATS] [DEVICE]\n");
        return 2;
    }
    em_ctx *c = em_ctx_create();
    em_unet2d_options o = em_unet2d_default_options();
    o.device = argc > 4 ? argv[4] : NULL;
    em_unet2d *u = em_unet2d_load(c, argv[1], &o);
    if (!u) {
        fprintf(stderr, "%s\n", em_ctx_error(c)->message);
        em_ctx_free(c);
        return 1;
    }
    const em_unet2d_config *cfg = em_unet2d_get_config(u);
    int64_t size = argc > 2 ? atoll(argv[2]) : cfg->sample_size[0];
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    em_ctx_set_device(c, em_unet2d_device(u));
    em_tensor *x = em_randn(c, EM_F32, 4, (int64_t[]){1, cfg->in_channels, size, size}, 1, 0.0, 1.0);
    em_tensor *t = em_scalar(c, 500.0, EM_F32);
    double best = 1e30;
    for (int r = -1; r < reps; r++) {
        em_scope_push(c);
        double t0 = now();
        em_tensor *y = em_unet2d_forward(c, u, x, t, NULL);
        float probe;
        /* reading one value waits for the whole forward */
        em_to_host_f32(c, em_slice(c, em_reshape(c, y, 1, (int64_t[]){-1}), 0, 0, 1, 1), &probe, 1);
        double dt = now() - t0;
        em_scope_pop(c);
        if (em_ctx_status(c)) {
            fprintf(stderr, "%s\n", em_ctx_error(c)->message);
            break;
        }
        if (r >= 0) {
            printf("forward %d: %.3f s\n", r, dt);
            if (dt < best) best = dt;
        }
    }
    printf("UNet2DModel %s, %lldx%lld on %s, %d threads: best %.3f s\n", argv[1], (long long)size,
           (long long)size, em_device_name(em_unet2d_device(u)), em_num_threads(), best);
    em_unet2d_free(u);
    em_ctx_free(c);
    return 0;
}
