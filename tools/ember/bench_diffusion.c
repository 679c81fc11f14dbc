/*
 * `ember bench diffusion`: one denoising step of Stable Diffusion 1.5's UNet2DConditionModel
 * (random weights; the SD 1.5 config, bench_unet_arch.c) — the UNet forward on classifier-free
 * guidance's doubled batch (2 latents of size/8, random encoder_hidden_states [2, 77, 768]) —
 * next to diffusers' UNet2DConditionModel on torch eager in the same run
 * (tools/ember/peers/torch_unet.py: the same folder, the same inputs, torch threads = Ember's).
 *
 * The weights are written once to a folder as diffusers saves them (config.json and
 * diffusion_pytorch_model.safetensors; a temporary folder removed at the end, or --dir kept and
 * reused), loaded by em_unet2d_load and by diffusers' from_pretrained. Per size: a warm-up
 * forward (its output compared with the peer's: max |diff|), then the median of --steps
 * forwards in wall seconds and in process CPU seconds (all threads; less disturbed by the
 * neighbours of a shared machine than the wall time), the step's FLOPs counted analytically
 * from the config (bench_unet_arch.c, per kind) and by the peer's torch.utils.flop_counter, and
 * the fraction of the FP32 FMA peak measured in this run (bench_limits.c). --dtype bf16: both
 * sides in bf16 (diffusers also in f32, the same run), fractions of the bf16 dot peak. Then the
 * 3x3 conv alone at the UNet's main shapes (batch 2, padding 1, in the dtype) against torch's
 * F.conv2d, group norm at the same shapes against F.group_norm (fractions of the bandwidth
 * bound) and the spatial attentions against F.scaled_dot_product_attention
 * (bench_diffusion_ops.c).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_diffusion_ops.h"
#include "bench_limits.h"
#include "bench_unet_arch.h"
#include "bench_util.h"
#include "cli.h"
#include "ember/ember.h"

#define CMD "ember bench diffusion"
#define MAX_SIZES 8
#define MAX_STEPS 64
#define CTX_LEN 77

typedef struct size_run {
    int64_t size, latent;
    double ms, cpu_ms;           /* Ember's medians */
    double compile_ms;           /* --compile: tracing and compiling the step (warm-up) */
    double peer_ms, peer_cpu_ms; /* the peer's in the same dtype (< 0: none) */
    double f32_ms, f32_cpu_ms;   /* the peer's in f32 when the dtype is not f32 (< 0: none) */
    double peer_flops;
    bench_unet_flops f;
    float *out; /* Ember's warm-up output, [2, out_channels, latent, latent] */
    int64_t out_n;
    double max_diff, max_ref; /* against the peer in the same dtype (< 0: none) */
    double diff_f32, peer_diff_f32; /* Ember and the peer against the peer's f32 (< 0: none) */
} size_run;

typedef struct opts {
    const char *preset, *device, *dir;
    int64_t sizes[MAX_SIZES];
    int n_sizes, steps;
    em_dtype dtype; /* of the weights and activations: f32 or bf16 */
    bool skip_peers, json, no_conv;
    bool ops_only; /* no UNet step: the op rows alone (at the largest size's shapes) */
    bool compile; /* Ember's step as one compiled program (compile mode), not eager ops */
} opts;

static void usage(void) {
    printf("usage: ember bench diffusion [--preset sd15|tiny] [--sizes 512,256] [--steps N]\n"
           "                             [--dtype f32|bf16] [--device D] [--skip-peers]\n"
           "                             [--no-conv | --ops-only] [--compile] [--dir DIR]\n"
           "                             [--json]\n\n"
           "Times one denoising step of Stable Diffusion 1.5's UNet2DConditionModel (random\n"
           "weights; classifier-free guidance's batch of 2, text states [2, 77, 768]) at each\n"
           "image size (latents of size/8), the median of --steps forwards (default 3) after a\n"
           "warm-up, in wall and process CPU seconds, next to diffusers on torch eager in the\n"
           "same run (same folder, inputs and thread count; $EMBER_PYTHON). Prints the step's\n"
           "FLOPs (counted from the config per op kind, and by torch's flop counter), the\n"
           "fraction of the FP32 FMA peak, the outputs' max difference, then ops alone at the\n"
           "largest size's shapes against torch in the same run (--no-conv: none of them): the\n"
           "3x3 conv at the UNet's main shapes (fraction of the FLOP peak); group norm\n"
           "(norm_num_groups, norm_eps, affine) at the same shapes, in GB/s and as a fraction\n"
           "of its bandwidth bound (bytes: x read once + y written once; bandwidth: the triad\n"
           "probe's, run before each call, caches cold); the spatial attentions (each\n"
           "cross-attention block's self-attention [2,heads,HW,D] and cross-attention on the\n"
           "77 text states; FLOPs 4*B*H*Tq*Tk*D, fraction of the FLOP peak). --ops-only: those\n"
           "op rows alone, no UNet step (nor its weights). --preset tiny:\n"
           "the same layout at 32/64 channels (default sizes 64,32). --dir keeps the\n"
           "random-weight folder there and reuses it (default: a temporary folder, removed).\n"
           "--dtype bf16: "
           "weights and activations in bf16 on both sides (the folder stays f32; the inputs\n"
           "are rounded to bf16 once and fed to both), diffusers timed in bf16 and in f32 in\n"
           "the same run, fractions of the bf16 dot peak, outputs compared with both.\n"
           "--compile: Ember's step as one compiled program (ember/compile.h: element-wise\n"
           "fusion, preplanned buffers), traced in the warm-up forward; diffusers stays eager.\n");
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){.preset = "sd15", .steps = 3, .dtype = EM_F32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--skip-peers")) o->skip_peers = true;
        else if (!strcmp(a, "--no-conv")) o->no_conv = true;
        else if (!strcmp(a, "--ops-only")) o->ops_only = true;
        else if (!strcmp(a, "--compile")) o->compile = true;
        else if (!strcmp(a, "--preset") && has) o->preset = argv[++i];
        else if (!strcmp(a, "--device") && has) o->device = argv[++i];
        else if (!strcmp(a, "--dir") && has) o->dir = argv[++i];
        else if (!strcmp(a, "--dtype") && has) {
            const char *d = argv[++i];
            if (!strcmp(d, "f32")) o->dtype = EM_F32;
            else if (!strcmp(d, "bf16")) o->dtype = EM_BF16;
            else {
                fprintf(stderr, "%s: --dtype '%s': f32 or bf16\n", CMD, d);
                return 2;
            }
        }
        else if (!strcmp(a, "--steps") && has) {
            long long v;
            if (!cli_int(CMD, a, argv[++i], 1, MAX_STEPS, &v)) return 2;
            o->steps = (int)v;
        } else if (!strcmp(a, "--sizes") && has) {
            long long v[MAX_SIZES];
            int n = cli_int_list(CMD, a, argv[++i], 8, 4096, v, MAX_SIZES);
            if (n < 0) return 2;
            for (int k = 0; k < n; k++) o->sizes[k] = v[k];
            o->n_sizes = n;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 1;
        } else {
            fprintf(stderr, "%s: unknown option or missing value '%s'\n", CMD, a);
            return 2;
        }
    }
    if (o->ops_only && o->no_conv) {
        fprintf(stderr, "%s: --ops-only with --no-conv leaves nothing to time\n", CMD);
        return 2;
    }
    if (!bench_unet_preset_config(o->preset)) {
        fprintf(stderr, "%s: unknown preset '%s' (sd15, tiny)\n", CMD, o->preset);
        return 2;
    }
    if (!o->n_sizes) {
        bool tiny = !strcmp(o->preset, "tiny");
        o->sizes[0] = tiny ? 64 : 512;
        o->sizes[1] = tiny ? 32 : 256;
        o->n_sizes = 2;
    }
    return 0;
}

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double loadavg(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f && fscanf(f, "%lf", &l) != 1) l = -1;
    if (f) fclose(f);
    return l;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

static bool fail(em_ctx *c, const char *what) {
    fprintf(stderr, "%s: %s: %s\n", CMD, what, em_ctx_error(c)->message);
    return false;
}

/* ---- the random-weight folder ---- */

typedef struct writer_job {
    em_ctx *c;
    em_safetensors_writer *w;
    uint64_t seed;
    double params;
} writer_job;

/* Uniform weights of torch's default Linear/Conv2d bound 1/sqrt(fan_in) (so activations keep
 * their scale through the blocks), norm scales around 1, small biases. */
static bool add_param(void *user, const char *name, int ndim, const int64_t *shape) {
    writer_job *j = user;
    double fan_in = 1;
    for (int d = 1; d < ndim; d++) fan_in *= (double)shape[d];
    bool is_norm = strstr(name, "norm") && !strstr(name, "time_emb") && ndim == 1;
    double lo = -1 / sqrt(fan_in), hi = -lo;
    if (ndim == 1) {
        lo = is_norm && strstr(name, ".weight") ? 0.5 : -0.1;
        hi = is_norm && strstr(name, ".weight") ? 1.5 : 0.1;
    }
    em_tensor *t = em_rand(j->c, EM_F32, ndim, shape, j->seed++, lo, hi);
    j->params += t ? (double)em_tensor_numel(t) : 0;
    return t && em_safetensors_writer_add(j->c, j->w, name, t) == EM_OK;
}

static bool is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static bool write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    bool ok = f && fputs(text, f) >= 0;
    if (f && fclose(f)) ok = false;
    if (!ok) fprintf(stderr, "%s: cannot write %s: %s\n", CMD, path, strerror(errno));
    return ok;
}

/* config.json and the weights into dir, unless both are there (a kept --dir). */
static bool make_folder(em_ctx *c, const char *dir, const char *config,
                        const em_unet2d_config *cfg, double *params) {
    char cpath[1100], wpath[1100];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    snprintf(wpath, sizeof wpath, "%s/diffusion_pytorch_model.safetensors", dir);
    writer_job j = {c, NULL, 1000, 0};
    if (is_file(cpath) && is_file(wpath)) { /* count only */
        bench_unet_walk(cfg, 1, 8, 8, 1, NULL, NULL, NULL);
        em_safetensors *st = em_safetensors_open(c, wpath);
        if (!st) return fail(c, "reusing the weights");
        for (int64_t i = 0; i < em_safetensors_count(st); i++) {
            const em_safetensors_info *in = em_safetensors_info_at(st, i);
            double n = 1;
            for (int d = 0; d < in->ndim; d++) n *= (double)in->shape[d];
            *params += n;
        }
        em_safetensors_free(st);
        return true;
    }
    if (!write_text(cpath, config)) return false;
    j.w = em_safetensors_writer_create(c);
    em_scope_push(c);
    bool ok = j.w && bench_unet_walk(cfg, 1, 8, 8, 1, add_param, &j, NULL) &&
              em_safetensors_writer_save(c, j.w, wpath) == EM_OK;
    em_scope_pop(c);
    em_safetensors_writer_free(j.w);
    *params = j.params;
    return ok || fail(c, "writing the random weights");
}

/* ---- Ember's step ---- */

/* The step as a compiled function: in = sample, timestep, encoder_hidden_states. */
static int unet_step(em_ctx *c, em_tensor *const *in, int n_in, const int64_t *statics,
                     int n_statics, em_tensor **out, int max_out, void *user) {
    (void)n_in, (void)statics, (void)n_statics, (void)max_out;
    out[0] = em_unet2d_forward_cond(c, user, in[0], in[1], in[2]);
    return out[0] ? 1 : -1;
}

static bool time_size(em_ctx *c, em_unet2d *u, const opts *o, const char *dir, size_run *r) {
    const em_unet2d_config *cfg = em_unet2d_get_config(u);
    int64_t l = r->latent, n = 2;
    em_scope_push(c);
    em_ctx_set_device(c, em_unet2d_device(u));
    float tv = 500;
    /* in the model's dtype; saved so, the peer widens them for its f32 run (exact) */
    em_tensor *x = em_cast(c, em_randn(c, EM_F32, EM_SHAPE(n, cfg->in_channels, l, l), 11, 0, 1),
                           o->dtype);
    em_tensor *ehs = em_cast(c, em_randn(c, EM_F32, EM_SHAPE(n, CTX_LEN, cfg->cross_attention_dim),
                                         12, 0, 1), o->dtype);
    em_tensor *t = em_from_host_on(c, em_unet2d_device(u), EM_F32, 1, (int64_t[]){1}, &tv);
    char path[1100];
    snprintf(path, sizeof path, "%s/inputs_%lld.safetensors", dir, (long long)r->size);
    const char *names[] = {"sample", "encoder_hidden_states", "timestep"};
    em_tensor *ins[] = {x, ehs, t};
    bool ok = x && ehs && t && em_safetensors_save(c, path, 3, names, ins, NULL) == EM_OK;
    if (!ok) {
        em_scope_pop(c);
        return fail(c, "making the inputs");
    }
    double wall[MAX_STEPS], cpu[MAX_STEPS];
    em_compiled *f = o->compile ? em_compile(c, "unet_step", unet_step, u) : NULL;
    if (o->compile && !f) {
        em_scope_pop(c);
        return fail(c, "compiling the step");
    }
    for (int s = -1; ok && s < o->steps; s++) {
        em_scope_push(c);
        double w0 = bench_now(), c0 = cpu_now();
        em_tensor *y = NULL;
        if (f) {
            em_tensor *args[3] = {x, t, ehs};
            if (em_compiled_call(c, f, args, 3, NULL, 0, &y, 1) != 1) y = NULL;
        } else {
            y = em_unet2d_forward_cond(c, u, x, t, ehs);
        }
        /* reading the result back is the step's end on any device */
        ok = y != NULL;
        if (ok && !r->out) {
            r->out_n = em_tensor_numel(y);
            r->out = malloc((size_t)r->out_n * sizeof *r->out);
            ok = r->out != NULL;
        }
        ok = ok && em_to_host_f32(c, y, r->out, r->out_n) == EM_OK;
        if (s >= 0) {
            wall[s] = (bench_now() - w0) * 1e3;
            cpu[s] = (cpu_now() - c0) * 1e3;
        }
        em_scope_pop(c);
        if (!o->json) fprintf(stderr, "\r  %lld px: step %d/%d", (long long)r->size, s + 2, o->steps + 1);
    }
    if (!o->json) fprintf(stderr, "\n");
    if (f) {
        em_compile_stats st;
        em_compiled_stats(f, &st);
        r->compile_ms = st.compile_ms;
        ok = ok && st.compiles == 1;
        if (!ok && !em_ctx_status(c))
            em_ctx_fail(c, EM_ERR_INTERNAL, "bench diffusion", "the step compiled %lld times "
                        "(%s)", (long long)st.compiles, st.last_reason);
    }
    em_compiled_free(f);
    em_scope_pop(c);
    if (!ok) return fail(c, "the UNet forward");
    r->ms = median(wall, o->steps);
    r->cpu_ms = median(cpu, o->steps);
    return true;
}

/* ---- the 3x3 conv alone ---- */

typedef struct conv_job {
    em_ctx *c;
    em_tensor *x, *w, *b;
    bool ok;
} conv_job;

static void conv_call(void *user) {
    conv_job *j = user;
    em_scope_push(j->c);
    em_conv2d_params p = em_conv2d_default_params();
    p.padding[0] = p.padding[1] = 1;
    em_tensor *y = em_conv2d(j->c, j->x, j->w, j->b, &p);
    j->ok = j->ok && y && em_device_sync(j->c, em_ctx_device(j->c)) == EM_OK;
    em_scope_pop(j->c);
}

/* The UNet's main 3x3 convs: its resnets' at each block width and resolution (the first block,
 * each change of width, and the last: for SD 1.5 at 512, 320 at 64x64, 640 at 32x32, 1280 at
 * 16x16 and at 8x8), batch 2. */
static int conv_shapes(const em_unet2d_config *cfg, int64_t latent, int64_t (*out)[4]) {
    int n = 0;
    for (int i = 0; i < cfg->n_blocks && n < EM_UNET2D_MAX_BLOCKS; i++, latent /= 2)
        if (!i || cfg->block_out_channels[i] != cfg->block_out_channels[i - 1] || i == cfg->n_blocks - 1) {
            out[n][0] = 2;
            out[n][1] = cfg->block_out_channels[i];
            out[n][2] = out[n][3] = latent;
            n++;
        }
    return n;
}

static double conv_flops(const int64_t *s) {
    return 2.0 * (double)(s[0] * s[1] * s[1] * 9 * s[2] * s[3]);
}

static bool time_conv(em_ctx *c, em_device *dev, em_dtype dt, const int64_t *s, double *ms) {
    em_scope_push(c);
    em_ctx_set_device(c, dev);
    conv_job j = {c, em_cast(c, em_rand(c, EM_F32, EM_SHAPE(s[0], s[1], s[2], s[3]), 21, -1, 1), dt),
                  em_cast(c, em_rand(c, EM_F32, EM_SHAPE(s[1], s[1], 3, 3), 22, -1, 1), dt),
                  em_cast(c, em_rand(c, EM_F32, EM_SHAPE(s[1]), 23, -1, 1), dt), true};
    j.ok = j.x && j.w && j.b;
    if (j.ok) *ms = bench_median_ms(conv_call, &j, 0.5);
    em_scope_pop(c);
    return j.ok || fail(c, "the conv2d");
}

/* ---- the peer ---- */

static void run_peer(const opts *o, const char *dir, size_run *runs, int64_t (*convs)[4],
                     int n_convs, const char *ops_tasks, bench_peer *peer) {
    char *tasks = malloc(16384);
    if (!tasks) {
        memset(peer, 0, sizeof *peer);
        snprintf(peer->why, sizeof peer->why, "out of memory");
        return;
    }
    int len = snprintf(tasks, 16384, "{\"dir\": \"%s\", \"threads\": %d, \"steps\": %d, "
                       "\"dtypes\": [%s], \"runs\": [", dir, em_num_threads(), o->steps,
                       o->dtype == EM_F32 ? "\"f32\"" : "\"bf16\", \"f32\"");
    for (int i = 0; i < o->n_sizes; i++)
        len += snprintf(tasks + len, 16384 - (size_t)len,
                        "%s{\"size\": %lld, \"inputs\": \"%s/inputs_%lld.safetensors\", "
                        "\"out\": \"%s/out_%lld\"}", i ? ", " : "",
                        (long long)runs[i].size, dir, (long long)runs[i].size, dir,
                        (long long)runs[i].size);
    len += snprintf(tasks + len, 16384 - (size_t)len, "], \"conv\": [");
    for (int i = 0; i < n_convs; i++)
        len += snprintf(tasks + len, 16384 - (size_t)len, "%s[%lld, %lld, %lld, %lld]",
                        i ? ", " : "", (long long)convs[i][0], (long long)convs[i][1],
                        (long long)convs[i][2], (long long)convs[i][3]);
    snprintf(tasks + len, 16384 - (size_t)len, "]%s}", ops_tasks);
    bench_peer_run("torch_unet.py", tasks, peer);
    free(tasks);
}

/* The peer's output of a size in dtype dt (its file out_S_dt.safetensors, written as f32) into
 * a malloc'd array of n floats, or NULL (none, or unreadable: the error printed). */
static float *peer_out(em_ctx *c, const char *dir, const size_run *r, const char *dt) {
    char path[1100];
    snprintf(path, sizeof path, "%s/out_%lld_%s.safetensors", dir, (long long)r->size, dt);
    if (!is_file(path) || !r->out) return NULL;
    em_scope_push(c);
    em_safetensors *st = em_safetensors_open(c, path);
    em_tensor *ref = st ? em_safetensors_load_as(c, st, "sample", EM_F32, em_device_cpu()) : NULL;
    float *v = ref && em_tensor_numel(ref) == r->out_n ? malloc((size_t)r->out_n * sizeof *v)
                                                       : NULL;
    if (v && em_to_host_f32(c, ref, v, r->out_n) != EM_OK) {
        free(v);
        v = NULL;
    }
    if (em_ctx_status(c)) {
        fprintf(stderr, "%s: the peer's output: %s\n", CMD, em_ctx_error(c)->message);
        em_ctx_clear_error(c);
    }
    em_safetensors_free(st);
    em_scope_pop(c);
    return v;
}

/* max |a - b| over n, and max |b| into *max_ref (when not NULL); -1 when either is NULL */
static double max_diff(const float *a, const float *b, int64_t n, double *max_ref) {
    if (!a || !b) return -1;
    double m = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]), v = fabs((double)b[i]);
        m = d > m ? d : m;
        r = v > r ? v : r;
    }
    if (max_ref) *max_ref = r;
    return m;
}

/* Ember's output against the peer's in the same dtype and, for bf16, against the peer's f32
 * (and the peer's bf16 against its f32: the scale of bf16's rounding on torch's side). */
static void compare(em_ctx *c, const char *dir, em_dtype dt, size_run *r) {
    r->max_diff = r->max_ref = r->diff_f32 = r->peer_diff_f32 = -1;
    float *same = peer_out(c, dir, r, dt == EM_F32 ? "f32" : "bf16");
    float *f32 = dt == EM_F32 ? NULL : peer_out(c, dir, r, "f32");
    r->max_diff = max_diff(r->out, same, r->out_n, &r->max_ref);
    r->diff_f32 = max_diff(r->out, f32, r->out_n, NULL);
    r->peer_diff_f32 = max_diff(same, f32, r->out_n, NULL);
    free(same);
    free(f32);
}

static double total_flops(const bench_unet_flops *f) {
    return f->conv3x3 + f->conv1x1 + f->linear + f->attention;
}

static void print_runs(const opts *o, const size_run *runs, double peak_gflops) {
    char a[32], b[32], d[32], e[32], g[32], h[32], k[32], m[32];
    const bool f32 = o->dtype == EM_F32;
    const char *dn = em_dtype_name(o->dtype), *pk = f32 ? "fp32" : "bf16";
    if (!o->json) {
        printf("%-5s %-7s %12s %11s %16s %15s %8s", "size", "latent", "ember s/step",
               "ember cpu-s", f32 ? "diffusers s/step" : "diff bf16 s/step",
               f32 ? "diffusers cpu-s" : "diff bf16 cpu-s", "speedup");
        if (!f32) printf(" %15s %14s %8s", "diff f32 s/step", "diff f32 cpu-s", "vs f32");
        printf(" %10s %8s %11s %10s\n", "GFLOP/step", "of peak", "torch GFLOP", "max|diff|");
    }
    for (int i = 0; i < o->n_sizes; i++) {
        const size_run *r = &runs[i];
        double fl = total_flops(&r->f);
        double frac = fl / (r->ms * 1e-3) / (peak_gflops * 1e9);
        double sp = r->peer_ms > 0 ? r->peer_ms / r->ms : -1;
        double sp32 = r->f32_ms > 0 ? r->f32_ms / r->ms : -1;
        if (o->json) {
            printf("{\"bench\": \"diffusion_step\", \"preset\": \"%s\", \"dtype\": \"%s\", "
                   "\"ember_mode\": \"%s\", \"ember_compile_s\": %.6g, \"size\": %lld, \"latent\": [2, 4, %lld, %lld], \"ember_s\": %.6g, "
                   "\"ember_cpu_s\": %.6g, \"flops\": %.6g, \"flops_conv3x3\": %.6g, "
                   "\"flops_conv1x1\": %.6g, \"flops_linear\": %.6g, \"flops_attention\": %.6g, "
                   "\"%s_peak_gflops\": %.6g, \"fraction_of_%s_peak\": %.4f",
                   o->preset, dn, o->compile ? "compiled" : "eager", r->compile_ms * 1e-3,
                   (long long)r->size, (long long)r->latent, (long long)r->latent,
                   r->ms * 1e-3, r->cpu_ms * 1e-3, fl, r->f.conv3x3, r->f.conv1x1, r->f.linear,
                   r->f.attention, pk, peak_gflops, pk, frac);
            if (r->peer_ms > 0)
                printf(", \"peer\": \"diffusers\", \"peer_s\": %.6g, \"peer_cpu_s\": %.6g, "
                       "\"speedup_vs_peer\": %.3f, \"torch_flops\": %.6g, \"max_abs_diff\": %.4g",
                       r->peer_ms * 1e-3, r->peer_cpu_ms * 1e-3, sp, r->peer_flops, r->max_diff);
            else
                printf(", \"peer\": null");
            if (r->f32_ms > 0)
                printf(", \"peer_f32_s\": %.6g, \"peer_f32_cpu_s\": %.6g, \"speedup_vs_peer_f32\":"
                       " %.3f, \"max_abs_diff_vs_peer_f32\": %.4g, \"peer_max_abs_diff_vs_f32\": "
                       "%.4g", r->f32_ms * 1e-3, r->f32_cpu_ms * 1e-3, sp32, r->diff_f32,
                       r->peer_diff_f32);
            printf("}\n");
            continue;
        }
        char lat[16];
        snprintf(lat, sizeof lat, "%lldx%lld", (long long)r->latent, (long long)r->latent);
        printf("%-5lld %-7s %12.4g %11.4g %16s %15s %8s", (long long)r->size, lat, r->ms * 1e-3,
               r->cpu_ms * 1e-3, bench_cell(a, sizeof a, "%.4g", r->peer_ms * 1e-3),
               bench_cell(b, sizeof b, "%.4g", r->peer_cpu_ms * 1e-3),
               bench_cell(d, sizeof d, "%.2fx", sp));
        if (!f32)
            printf(" %15s %14s %8s", bench_cell(h, sizeof h, "%.4g", r->f32_ms * 1e-3),
                   bench_cell(k, sizeof k, "%.4g", r->f32_cpu_ms * 1e-3),
                   bench_cell(m, sizeof m, "%.2fx", sp32));
        printf(" %10.4g %7.1f%% %11s %10s\n", fl * 1e-9, 100 * frac,
               bench_cell(e, sizeof e, "%.4g", r->peer_flops * 1e-9),
               r->max_diff >= 0 ? (snprintf(g, sizeof g, "%.2e", r->max_diff), g) : "-");
    }
    if (o->json) return;
    for (int i = 0; o->compile && i < o->n_sizes; i++)
        printf("compile %lld px: traced and planned in %.1f ms (in the warm-up forward; not in "
               "s/step)\n", (long long)runs[i].size, runs[i].compile_ms);
    for (int i = 0; i < o->n_sizes; i++) {
        const size_run *r = &runs[i];
        if (!f32 && r->max_diff >= 0)
            printf("agreement %lld px (max |output| %.3g): Ember bf16 vs diffusers bf16 %.3g, "
                   "Ember bf16 vs diffusers f32 %.3g, diffusers bf16 vs diffusers f32 %.3g\n",
                   (long long)r->size, r->max_ref, r->max_diff, r->diff_f32, r->peer_diff_f32);
        const bench_unet_flops *f = &r->f;
        double t = total_flops(f) / 100;
        printf("flops %lld px (analytic, GFLOP): conv3x3 %.4g (%.0f%%), conv1x1 %.4g (%.0f%%), "
               "linear %.4g (%.0f%%), attention %.4g (%.0f%%)\n",
               (long long)r->size, f->conv3x3 * 1e-9, f->conv3x3 / t, f->conv1x1 * 1e-9,
               f->conv1x1 / t, f->linear * 1e-9, f->linear / t, f->attention * 1e-9,
               f->attention / t);
    }
    printf("time per op kind: Ember has no per-op timer; profile with `perf record` "
           "(docs/notes/2026-12-03-bench-diffusion.md)\n");
}

static void print_convs(const opts *o, int64_t (*convs)[4], const double *ms, int n,
                        const bench_peer *peer, double peak_gflops) {
    char a[32], b[32], d[32];
    const char *pk = o->dtype == EM_F32 ? "fp32" : "bf16";
    if (!o->json)
        printf("%-24s %9s %9s %8s %9s %8s %8s\n", o->dtype == EM_F32 ? "conv3x3 pad 1 [N,C,H,W]"
               : "bf16 conv3x3 [N,C,H,W]", "ember ms",
               "GFLOP/s", "of peak", "torch ms", "of peak", "speedup");
    for (int i = 0; i < n; i++) {
        char name[96], shape[64];
        snprintf(name, sizeof name, "conv_%lld_%lld_%lld_%lld", (long long)convs[i][0],
                 (long long)convs[i][1], (long long)convs[i][2], (long long)convs[i][3]);
        snprintf(shape, sizeof shape, "[%lld,%lld,%lld,%lld]", (long long)convs[i][0],
                 (long long)convs[i][1], (long long)convs[i][2], (long long)convs[i][3]);
        double fl = conv_flops(convs[i]), pms = bench_peer_ms(peer, name);
        double gf = fl / (ms[i] * 1e-3) * 1e-9, pf = pms > 0 ? fl / (pms * 1e-3) * 1e-9 : -1;
        if (o->json) {
            printf("{\"bench\": \"diffusion_conv3x3\", \"shape\": \"%s\", \"ms\": %.6g, "
                   "\"dtype\": \"%s\", \"flops\": %.6g, \"fraction_of_%s_peak\": %.4f", shape,
                   ms[i], em_dtype_name(o->dtype), fl, pk, gf / peak_gflops);
            if (pms > 0)
                printf(", \"peer\": \"torch\", \"peer_ms\": %.6g, \"peer_fraction_of_%s_peak\": "
                       "%.4f, \"speedup_vs_peer\": %.3f", pms, pk, pf / peak_gflops, pms / ms[i]);
            printf("}\n");
            continue;
        }
        printf("%-24s %9.4g %9.1f %7.1f%% %9s %8s %8s\n", shape, ms[i], gf,
               100 * gf / peak_gflops, bench_cell(a, sizeof a, "%.4g", pms),
               bench_cell(b, sizeof b, "%.1f%%", pf > 0 ? 100 * pf / peak_gflops : -1),
               bench_cell(d, sizeof d, "%.2fx", pms > 0 ? pms / ms[i] : -1));
    }
}

static void remove_folder(const char *dir, const opts *o) {
    const char *fixed[] = {"config.json", "diffusion_pytorch_model.safetensors"};
    char path[1100];
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, fixed[i]);
        unlink(path);
    }
    for (int i = 0; i < o->n_sizes; i++) {
        snprintf(path, sizeof path, "%s/inputs_%lld.safetensors", dir, (long long)o->sizes[i]);
        unlink(path);
        for (int k = 0; k < 2; k++) {
            snprintf(path, sizeof path, "%s/out_%lld_%s.safetensors", dir, (long long)o->sizes[i],
                     k ? "bf16" : "f32");
            unlink(path);
        }
    }
    rmdir(dir);
}

int bench_diffusion(int argc, char **argv) {
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    const char *config = bench_unet_preset_config(o.preset);
    em_ctx *c = em_ctx_create();
    em_unet2d_config cfg;
    if (!c || em_unet2d_config_parse(c, config, strlen(config), o.preset, &cfg) != EM_OK) {
        if (c) fail(c, "the preset's config");
        em_ctx_free(c);
        return 1;
    }
    int64_t mult = 8 << (cfg.n_blocks - 1);
    for (int i = 0; i < o.n_sizes; i++)
        if (o.sizes[i] % mult) {
            fprintf(stderr, "%s: size %lld is not a multiple of %lld (8 x the UNet's "
                    "downsampling)\n", CMD, (long long)o.sizes[i], (long long)mult);
            em_ctx_free(c);
            return 2;
        }
    char dir[1024];
    if (o.dir) {
        snprintf(dir, sizeof dir, "%s", o.dir);
        if (mkdir(dir, 0755) && errno != EEXIST) {
            fprintf(stderr, "%s: cannot create %s: %s\n", CMD, dir, strerror(errno));
            em_ctx_free(c);
            return 1;
        }
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/ember-bench-diffusion-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "%s: cannot create a temporary folder: %s\n", CMD, strerror(errno));
            em_ctx_free(c);
            return 1;
        }
    }
    double load0 = loadavg(), params = 0;
    size_run runs[MAX_SIZES] = {{0}};
    int64_t convs[EM_UNET2D_MAX_BLOCKS][4];
    double conv_ms[EM_UNET2D_MAX_BLOCKS];
    int64_t largest = 0; /* the convs at the largest size's latents */
    for (int i = 0; i < o.n_sizes; i++) largest = o.sizes[i] > largest ? o.sizes[i] : largest;
    int n_convs = o.no_conv ? 0 : conv_shapes(&cfg, largest / 8, convs);
    /* group norm at the conv shapes, the spatial attentions at the same size */
    bench_gn_row gns[EM_UNET2D_MAX_BLOCKS];
    bench_attn_row attns[BENCH_DIFF_MAX_ATTN];
    int n_gns = n_convs;
    int n_attns = o.no_conv ? 0 : bench_attn_shapes(&cfg, largest / 8, CTX_LEN, attns);
    for (int i = 0; i < n_gns; i++) {
        memset(&gns[i], 0, sizeof gns[i]);
        memcpy(gns[i].s, convs[i], sizeof gns[i].s);
    }
    bench_peer peer = {0};
    bench_limits L = {0};
    em_unet2d *u = NULL;
    if (o.ops_only) o.n_sizes = 0; /* no step (the shapes above are the largest size's) */
    bool ok = o.ops_only || make_folder(c, dir, config, &cfg, &params);
    if (ok) bench_measure_peaks(&L);
    if (ok && !o.ops_only) {
        em_unet2d_options uo = em_unet2d_default_options();
        uo.device = o.device;
        uo.dtype = o.dtype;
        u = em_unet2d_load(c, dir, &uo);
        ok = u || fail(c, "loading the UNet");
    }
    if (ok && !o.json && o.ops_only)
        printf("diffusion: UNet2DConditionModel preset %s's ops at %lld px (--ops-only: no "
               "step), %s, device %s, %d threads; FP32 FMA peak %.1f, bf16 dot peak %.1f GFLOP/s "
               "(measured now); load average %.2f\n", o.preset, (long long)largest,
               em_dtype_name(o.dtype), o.device ? o.device : "cpu", em_num_threads(),
               L.fp32_gflops, L.bf16_gflops, load0);
    else if (ok && !o.json)
        printf("diffusion: UNet2DConditionModel preset %s (%.1f M parameters, %s, random "
               "weights), batch 2 (classifier-free guidance), text states [2, %d, %lld], device "
               "%s, Ember %s, %d threads; FP32 FMA peak %.1f, bf16 dot peak %.1f GFLOP/s (measured now); "
               "load average %.2f\n",
               o.preset, params * 1e-6, em_dtype_name(o.dtype), CTX_LEN,
               (long long)cfg.cross_attention_dim, o.device ? o.device : "cpu",
               o.compile ? "compiled (one program per size)" : "eager", em_num_threads(),
               L.fp32_gflops, L.bf16_gflops, load0);
    fflush(stdout);
    for (int i = 0; ok && i < o.n_sizes; i++) {
        size_run *r = &runs[i];
        r->size = o.sizes[i];
        r->latent = o.sizes[i] / 8;
        r->peer_ms = r->peer_cpu_ms = r->peer_flops = r->max_diff = -1;
        r->f32_ms = r->f32_cpu_ms = r->diff_f32 = r->peer_diff_f32 = -1;
        bench_unet_walk(&cfg, 2, r->latent, r->latent, CTX_LEN, NULL, NULL, &r->f);
        ok = time_size(c, u, &o, dir, r);
    }
    em_unet2d_free(u); /* before the peer loads its copy */
    if (ok) { /* the peak again: a neighbour's burst lowers one measurement; keep the higher */
        bench_limits L2 = {0};
        bench_measure_peaks(&L2);
        L.fp32_gflops = L2.fp32_gflops > L.fp32_gflops ? L2.fp32_gflops : L.fp32_gflops;
        L.bf16_gflops = L2.bf16_gflops > L.bf16_gflops ? L2.bf16_gflops : L.bf16_gflops;
    }
    em_device *dev = o.device ? em_device_get(c, o.device) : em_device_cpu();
    for (int i = 0; ok && i < n_convs; i++)
        ok = time_conv(c, dev, o.dtype, convs[i], &conv_ms[i]);
    ok = ok && bench_time_group_norms(c, dev, o.dtype, cfg.norm_num_groups, cfg.norm_eps, gns,
                                      n_gns);
    for (int i = 0; ok && i < n_attns; i++) ok = bench_time_attn(c, dev, o.dtype, &attns[i]);
    if (ok && !o.skip_peers) {
        char ops_tasks[2048];
        bench_ops_peer_tasks(ops_tasks, sizeof ops_tasks, gns, n_gns, cfg.norm_num_groups,
                             cfg.norm_eps, attns, n_attns);
        run_peer(&o, dir, runs, convs, n_convs, ops_tasks, &peer);
        for (int i = 0; i < o.n_sizes; i++) {
            char name[64];
            long long sz = (long long)runs[i].size;
            const char *dn = o.dtype == EM_F32 ? "f32" : "bf16";
            snprintf(name, sizeof name, "step_%lld_%s", sz, dn);
            runs[i].peer_ms = bench_peer_ms(&peer, name);
            snprintf(name, sizeof name, "step_cpu_%lld_%s", sz, dn);
            runs[i].peer_cpu_ms = bench_peer_ms(&peer, name);
            if (o.dtype != EM_F32) {
                snprintf(name, sizeof name, "step_%lld_f32", sz);
                runs[i].f32_ms = bench_peer_ms(&peer, name);
                snprintf(name, sizeof name, "step_cpu_%lld_f32", sz);
                runs[i].f32_cpu_ms = bench_peer_ms(&peer, name);
            }
            snprintf(name, sizeof name, "flops_%lld", (long long)runs[i].size);
            runs[i].peer_flops = bench_peer_ms(&peer, name);
            compare(c, dir, o.dtype, &runs[i]);
        }
        if (!peer.available && !o.json) printf("diffusers: not run (%s)\n", peer.why);
    }
    if (ok) {
        double peak = o.dtype == EM_F32 ? L.fp32_gflops : L.bf16_gflops;
        if (o.n_sizes) print_runs(&o, runs, peak);
        print_convs(&o, convs, conv_ms, n_convs, &peer, peak);
        bench_print_group_norms(o.json, o.dtype, gns, n_gns, cfg.norm_num_groups, cfg.norm_eps,
                                &peer);
        bench_print_attns(o.json, o.dtype, attns, n_attns, &peer, peak);
        if (!o.json)
            printf("fractions of the %s peak %.1f GFLOP/s (the higher of the measurements "
                   "before and after the steps); load average after: %.2f\n",
                   o.dtype == EM_F32 ? "FP32 FMA" : "bf16 dot", peak, loadavg());
    }
    for (int i = 0; i < o.n_sizes; i++) free(runs[i].out);
    if (!o.dir) remove_folder(dir, &o);
    em_ctx_free(c);
    return ok ? 0 : 1;
}
