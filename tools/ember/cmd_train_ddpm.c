/*
 * `ember train-ddpm`: a small DDPM (UNet2DModel + DDPMScheduler) trained from scratch on
 * scikit-learn's 8x8 digits file and saved as a diffusers DDPMPipeline folder (ember/ddpm.h),
 * which `ember image` and diffusers' DDPMPipeline.from_pretrained both sample.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "ember/ember.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ember train-ddpm --data digits.csv.gz --out DIR [--steps N] [--batch B]\n"
            "                        [--lr LR] [--seed S] [--channels C0,C1,...]\n"
            "                        [--layers L] [--timesteps T] [--warmup W]\n"
            "                        [--log-every K] [--ema [--ema-max-decay D]]\n\n"
            "Trains a UNet2DModel from freshly initialised weights as a DDPM denoiser on\n"
            "scikit-learn's digits (sklearn/datasets/data/digits.csv.gz: 64 pixels 0..16 and a\n"
            "label per line; gzip or plain), scaled to [-1, 1], and writes DIR as a diffusers\n"
            "DDPMPipeline folder (model_index.json, unet/, scheduler/). Each step: B images (a\n"
            "fresh shuffle each epoch), t ~ U{0..T-1}, noise ~ N(0, 1), MSE of the predicted\n"
            "noise, AdamW (weight decay 0.01) with a cosine schedule after W warmup steps.\n"
            "The loss (mean over the last K steps) goes to stderr every K steps.\n\n"
            "  --steps N      optimizer steps (default 2000)\n"
            "  --batch B      images per step (default 32)\n"
            "  --lr LR        peak learning rate (default 2e-3)\n"
            "  --seed S       weights, shuffling, noise and timesteps (default 0)\n"
            "  --channels L   block_out_channels, one block per value (default 16,32; the last\n"
            "                 block has self-attention); the image side (8) must be divisible by\n"
            "                 2^(blocks - 1)\n"
            "  --layers L     resnets per down block (default 1)\n"
            "  --timesteps T  the scheduler's num_train_timesteps (default 1000)\n"
            "  --warmup W     linear warmup steps (default 100)\n"
            "  --log-every K  (default 100)\n"
            "  --ema          keep an exponential moving average of the weights and save it\n"
            "                 instead of the last weights (train_unconditional.py's --use_ema:\n"
            "                 diffusers' EMAModel with warmup, inv_gamma 1, power 3/4)\n"
            "  --ema-max-decay D  the average's largest decay (default 0.9999)\n");
}

typedef struct ddpm_args {
    const char *data, *out;
    long long steps, batch, seed, layers, timesteps, warmup, log_every;
    long long channels[EM_UNET2D_MAX_BLOCKS];
    int n_channels;
    double lr, ema_max_decay;
    bool ema;
} ddpm_args;

static int parse(int argc, char **argv, ddpm_args *a) {
    const char *cmd = "train-ddpm";
    *a = (ddpm_args){.steps = 2000, .batch = 32, .lr = 2e-3, .layers = 1, .timesteps = 1000,
                     .warmup = 100, .log_every = 100, .channels = {16, 32}, .n_channels = 2,
                     .ema_max_decay = 0.9999};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "-h") || !strcmp(k, "--help")) {
            usage(stdout);
            return 1;
        }
        if (!strcmp(k, "--ema")) { /* a flag */
            a->ema = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "ember train-ddpm: %s needs a value (see ember train-ddpm --help)\n",
                    k);
            return 2;
        }
        bool ok = true;
        i++;
        if (!strcmp(k, "--data")) a->data = v;
        else if (!strcmp(k, "--out")) a->out = v;
        else if (!strcmp(k, "--steps")) ok = cli_int(cmd, k, v, 1, 100000000, &a->steps);
        else if (!strcmp(k, "--batch")) ok = cli_int(cmd, k, v, 1, 65536, &a->batch);
        else if (!strcmp(k, "--seed")) ok = cli_int(cmd, k, v, 0, 1LL << 62, &a->seed);
        else if (!strcmp(k, "--layers")) ok = cli_int(cmd, k, v, 1, EM_UNET2D_MAX_LAYERS, &a->layers);
        else if (!strcmp(k, "--timesteps")) ok = cli_int(cmd, k, v, 2, 100000, &a->timesteps);
        else if (!strcmp(k, "--warmup")) ok = cli_int(cmd, k, v, 0, 100000000, &a->warmup);
        else if (!strcmp(k, "--log-every")) ok = cli_int(cmd, k, v, 1, 100000000, &a->log_every);
        else if (!strcmp(k, "--lr")) ok = cli_real(cmd, k, v, 0, 10, &a->lr);
        else if (!strcmp(k, "--ema-max-decay")) ok = cli_real(cmd, k, v, 0, 1, &a->ema_max_decay);
        else if (!strcmp(k, "--channels")) {
            a->n_channels = cli_int_list(cmd, k, v, 4, 4096, a->channels, EM_UNET2D_MAX_BLOCKS);
            ok = a->n_channels > 0;
        } else {
            fprintf(stderr, "ember train-ddpm: unknown option '%s' (see ember train-ddpm --help)\n",
                    k);
            return 2;
        }
        if (!ok) return 2;
    }
    const char *missing = !a->data ? "--data" : !a->out ? "--out" : NULL;
    if (missing) {
        fprintf(stderr, "ember train-ddpm: %s is required\n\n", missing);
        usage(stderr);
        return 2;
    }
    if (8 % (1 << (a->n_channels - 1))) {
        fprintf(stderr, "ember train-ddpm: %d blocks halve the 8x8 image %d times; at most 4 "
                        "blocks\n", a->n_channels, a->n_channels - 1);
        return 2;
    }
    return 0;
}

/* The UNet2DModel's config.json: 1 channel 8x8, plain blocks then one with self-attention,
 * group norms of the largest power of two up to 8 that divides every width. */
static void unet_config(const ddpm_args *a, char *buf, size_t n) {
    int groups = 8;
    for (int i = 0; i < a->n_channels; i++)
        while (a->channels[i] % groups) groups /= 2;
    char ch[256] = "", down[512] = "", up[512] = "";
    for (int i = 0; i < a->n_channels; i++) {
        bool attn_down = i == a->n_channels - 1, attn_up = i == 0;
        snprintf(ch + strlen(ch), sizeof ch - strlen(ch), "%s%lld", i ? ", " : "",
                 a->channels[i]);
        snprintf(down + strlen(down), sizeof down - strlen(down), "%s\"%s\"", i ? ", " : "",
                 attn_down ? "AttnDownBlock2D" : "DownBlock2D");
        snprintf(up + strlen(up), sizeof up - strlen(up), "%s\"%s\"", i ? ", " : "",
                 attn_up ? "AttnUpBlock2D" : "UpBlock2D");
    }
    snprintf(buf, n,
             "{\"_class_name\": \"UNet2DModel\", \"sample_size\": 8, \"in_channels\": 1, "
             "\"out_channels\": 1, \"block_out_channels\": [%s], \"layers_per_block\": %lld, "
             "\"down_block_types\": [%s], \"up_block_types\": [%s], \"norm_num_groups\": %d, "
             "\"attention_head_dim\": 8}",
             ch, a->layers, down, up, groups);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The batch of rows order[from..from+b) of the dataset px ([N, 64] on the host). */
static em_tensor *batch(em_ctx *c, const float *px, const int64_t *order, int64_t b,
                        float *buf) {
    for (int64_t i = 0; i < b; i++) memcpy(buf + i * 64, px + order[i] * 64, 64 * sizeof *buf);
    return em_from_host(c, EM_F32, 4, (int64_t[]){b, 1, 8, 8}, buf);
}

static void shuffle(em_torch_generator *g, int64_t *order, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(em_torch_generator_random(g) % (uint32_t)(i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static int train(em_ctx *c, const ddpm_args *a) {
    char cfg[2048], sched[256];
    unet_config(a, cfg, sizeof cfg);
    snprintf(sched, sizeof sched,
             "{\"_class_name\": \"DDPMScheduler\", \"num_train_timesteps\": %lld, "
             "\"beta_schedule\": \"linear\", \"clip_sample\": true}",
             a->timesteps);
    em_tensor *data = em_digits_csv_load(c, a->data, 8, NULL);
    if (!data) return 1;
    data = em_detach(c, data);
    int64_t n = em_tensor_shape(data)[0], b = a->batch < n ? a->batch : n;
    float *px = malloc((size_t)n * 64 * sizeof *px), *buf = malloc((size_t)b * 64 * sizeof *buf);
    int64_t *order = malloc((size_t)n * sizeof *order);
    em_torch_generator *g = em_torch_generator_create((uint64_t)a->seed + 1);
    em_unet2d *u = em_unet2d_create(c, cfg, strlen(cfg), (uint64_t)a->seed, NULL);
    em_scheduler *s = u ? em_scheduler_from_json(c, sched, "train-ddpm") : NULL;
    em_adamw_options o = em_adamw_default_options();
    o.lr = a->lr;
    em_ddpm_trainer *t = s ? em_ddpm_trainer_create(c, u, s, &o, (uint64_t)a->seed + 2) : NULL;
    em_ema *ema = NULL;
    if (t && a->ema) { /* train_unconditional.py's EMAModel(unet.parameters(), ...) */
        em_ema_options eo = em_ema_default_options();
        eo.decay = a->ema_max_decay;
        eo.use_ema_warmup = true;
        eo.inv_gamma = 1.0;
        eo.power = 0.75;
        int np = em_unet2d_param_count(u);
        em_tensor **ps = malloc((size_t)np * sizeof *ps);
        for (int i = 0; ps && i < np; i++) ps[i] = em_unet2d_param(u, i);
        ema = ps ? em_ema_create(c, ps, np, &eo) : NULL;
        free(ps);
        if (!ema && !em_ctx_status(c)) em_ctx_fail(c, EM_ERR_OOM, "train-ddpm", "out of memory");
    }
    int rc = 1;
    if (!px || !buf || !order || !g) {
        em_ctx_fail(c, EM_ERR_OOM, "train-ddpm", "out of memory");
    } else if (t && (!a->ema || ema) && em_to_host_f32(c, data, px, n * 64) == EM_OK) {
        int64_t params = 0;
        for (int i = 0; i < em_unet2d_param_count(u); i++)
            params += em_tensor_numel(em_unet2d_param(u, i));
        fprintf(stderr, "train-ddpm: %lld images, UNet2DModel of %lld parameters, %lld steps "
                "of %lld\n", (long long)n, (long long)params, a->steps, (long long)b);
        for (int64_t i = 0; i < n; i++) order[i] = i;
        int64_t at = n;
        double sum = 0, t0 = now();
        for (int64_t step = 0; step < a->steps; step++) {
            if (at + b > n) {
                shuffle(g, order, n);
                at = 0;
            }
            em_optimizer_set_lr(em_ddpm_trainer_optimizer(t),
                                a->lr * em_lr_cosine_with_warmup(step, a->warmup, a->steps, 0.5));
            em_scope_push(c);
            double loss = 0;
            em_tensor *x = batch(c, px, order + at, b, buf);
            at += b;
            em_status st = x ? em_ddpm_train_step(c, t, x, NULL, NULL, &loss) : em_ctx_status(c);
            if (!st && ema) st = em_ema_step(c, ema);
            em_scope_pop(c);
            if (st) break;
            sum += loss;
            if ((step + 1) % a->log_every == 0 || step + 1 == a->steps) {
                int64_t k = (step + 1) % a->log_every ? (step + 1) % a->log_every : a->log_every;
                fprintf(stderr, "step %lld/%lld  loss %.4f  %.1f s\n", (long long)step + 1,
                        a->steps, sum / (double)k, now() - t0);
                sum = 0;
            }
        }
        /* the average is what is saved (ema_model.copy_to(unet.parameters()) before saving) */
        if (!em_ctx_status(c) && ema) em_ema_copy_to(c, ema);
        if (!em_ctx_status(c) && em_ddpm_pipeline_save(c, u, sched, a->out) == EM_OK) {
            fprintf(stderr, "wrote %s (DDPMPipeline%s) in %.1f s\n", a->out,
                    ema ? ", the weights' moving average" : "", now() - t0);
            rc = 0;
        }
    }
    em_ema_free(ema);
    em_ddpm_trainer_free(t);
    em_scheduler_free(s);
    em_unet2d_free(u);
    em_torch_generator_free(g);
    em_tensor_release(data);
    free(px);
    free(buf);
    free(order);
    return rc;
}

int cmd_train_ddpm(int argc, char **argv) {
    ddpm_args a;
    int r = parse(argc, argv, &a);
    if (r) return r == 1 ? 0 : 2;
    em_ctx *c = em_ctx_create();
    if (!c) return 1;
    int rc = train(c, &a);
    if (rc)
        fprintf(stderr, "ember train-ddpm: %s\n",
                em_ctx_error(c) ? em_ctx_error(c)->message : "failed");
    em_ctx_free(c);
    return rc;
}
