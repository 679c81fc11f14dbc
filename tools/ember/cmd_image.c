/* `ember image`: a diffusers pipeline folder run to a PNG (and the image as .npy, exactly what
 * the pipeline returns with output_type="np"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "ember/ember.h"
#include "io/npy.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ember image --model DIR (--seed S | --seeds S1,S2,... | --latents FILE.npy)\n"
            "                   (--out FILE.png | --out-latents FILE.npy)\n"
            "                   [--prompt T [--negative-prompt T] [--guidance G]\n"
            "                    [--prompt-2 T] [--negative-prompt-2 T]\n"
            "                    [--height H --width W] [--max-sequence-length N]]\n"
            "                   [--scheduler NAME] [--steps N] [--eta E] [--device D]\n"
            "                   [--dtype f32|bf16|f16]\n"
            "                   [--out-npy FILE.npy] [--compile] [--class-label N[,N...]]\n"
            "                   [--vae-tiling] [--vae-slicing] [--init-image FILE [--strength S]\n"
            "                    [--mask-image FILE] [--aesthetic-score A]\n"
            "                    [--negative-aesthetic-score A]]\n"
            "                   [--num-images N [--grid-cols K] [--upscale U]]\n"
            "                   [--prompt-embeds FILE.npy [--negative-prompt-embeds FILE.npy]\n"
            "                    [--pooled-prompt-embeds FILE.npy]\n"
            "                    [--negative-pooled-prompt-embeds FILE.npy]]\n"
            "                   [--denoising-end F] [--image-latents FILE.npy\n"
            "                    [--denoising-start F]]\n"
            "                   [--tp N] [--cp N [--cp-schedule ring|all-gather|ulysses]\n"
            "                                [--cp-ring R --cp-ulysses U]]\n\n"
            "Runs a diffusers pipeline folder (model_index.json; DDPMPipeline, DDIMPipeline,\n"
            "StableDiffusionPipeline, StableDiffusionInpaintPipeline, StableDiffusionXLPipeline,\n"
            "StableDiffusionXLImg2ImgPipeline (the SDXL refiner), StableDiffusion3Pipeline,\n"
            "FluxPipeline and DiTPipeline today) and\n"
            "writes the image. --seed S draws\n"
            "what diffusers draws with\n"
            "generator=torch.Generator(\"cpu\").manual_seed(S): the initial latents and the\n"
            "per-step noise. docs/diffusion.md has the details.\n\n"
            "  --model DIR         the pipeline folder\n"
            "  --scheduler NAME    replace the folder's scheduler, as Class.from_config(its\n"
            "                      config): ddpm ddim pndm euler euler-a dpm++2m flow-euler\n"
            "  --prompt T          the text (Stable Diffusion, SDXL, SD3 and Flux; required there)\n"
            "  --negative-prompt T what to steer away from (default: the empty prompt; SDXL with\n"
            "                      force_zeros_for_empty_prompt: zero embeddings)\n"
            "  --prompt-2 T, --negative-prompt-2 T  SDXL and SD3: the texts of the second\n"
            "                      text encoder (Flux: --prompt-2 is the T5's text)\n"
            "                      (default: --prompt / --negative-prompt)\n"
            "  --aesthetic-score A, --negative-aesthetic-score A  an SDXL refiner's\n"
            "                      (requires_aesthetics_score) last time id of the prompt's and\n"
            "                      of the negative's rows (default 6.0 and 2.5)\n"
            "  --guidance G        classifier-free guidance scale, on when > 1 (default 7.5 for\n"
            "                      Stable Diffusion, 5 for SDXL, 7 for SD3, 4 for DiT); Flux:\n"
            "                      the embedded guidance of a guidance_embeds model (3.5)\n"
            "  --height H, --width W  the image size (default: the UNet's sample_size times\n"
            "                      the VAE's scale factor)\n"
            "  --steps N           denoising steps (default: the pipeline's, 1000 DDPM, 50 DDIM\n"
            "                      and Stable Diffusion, 28 SD3 and Flux)\n"
            "  --max-sequence-length N  SD3: the T5 tokens after CLIP's, zeros without\n"
            "                      text_encoder_3 (default 256; 1 to 512); Flux: the T5\n"
            "                      tokens (default 512)\n"
            "  --eta E             DDIM's eta (0: deterministic)\n"
            "  --seed S            the generator's seed\n"
            "  --seeds S1,S2,...   a generator per image, diffusers' generator=[torch.Generator(\n"
            "                      \"cpu\").manual_seed(s) for s in seeds]: one batched run of\n"
            "                      as many images (Stable Diffusion: num_images_per_prompt; DiT:\n"
            "                      one per --class-label); not with --seed\n"
            "  --latents FILE      initial noise, float32 .npy of the latent shape [1, C, H, W]\n"
            "                      (Flux: that, or packed [1, H W / 4, 4C] as diffusers takes)\n"
            "                      (with --seed, the seed still gives the per-step noise)\n"
            "  --device D          cpu (default), xla:0, tpu:0, cuda:0, ...\n"
            "  --dtype T           f32 (default), bf16 or f16: the denoiser's and the VAE's\n"
            "                      weights and activations (diffusers' torch_dtype; the text\n"
            "                      encoders, the latents and the scheduler stay f32)\n"
            "  --tp N              DiT, SD3 and Flux pipelines: tensor parallelism of\n"
            "                      degree N over the transformer (each rank 1/N of every\n"
            "                      block's heads and feed-forward; the rest whole): with\n"
            "                      --device cpu (or none) over the N processes of mpirun\n"
            "                      -np N; with a PJRT kind (--device xla, cuda, tpu) over its\n"
            "                      devices 0..N-1 in this process; only rank 0 writes and\n"
            "                      prints\n"
            "  --cp N              DiT, SD3 and Flux pipelines: context parallelism of degree\n"
            "                      N (diffusers' ContextParallelConfig): each rank 1/N of the\n"
            "                      image's tokens, attention against every rank's keys and\n"
            "                      values; ranks and devices as --tp; with --tp T, T x N\n"
            "                      ranks: tensor parallelism over T consecutive ranks,\n"
            "                      context parallelism across them\n"
            "  --cp-schedule S     how --cp's attention meets every rank's keys and values:\n"
            "                      ring (the default: the blocks passed around the ranks,\n"
            "                      one held at a time, merged by log-sum-exp) or all-gather\n"
            "                      (every rank's gathered, one attention over them) or\n"
            "                      ulysses (all-to-all from a token split to a head split\n"
            "                      and back; the heads must divide by N)\n"
            "  --cp-ring R, --cp-ulysses U\n"
            "                      diffusers' ContextParallelConfig(ring_degree=R,\n"
            "                      ulysses_degree=U), R x U = N (give both): Ulysses'\n"
            "                      all-to-all inside each U consecutive ranks, the ring\n"
            "                      across them on those heads (the heads must divide by U)\n"
            "  --compile           the denoiser step as one compiled program per latent shape\n"
            "                      (the timestep an input: every step reuses it)\n"
            "  --vae-tiling        decode with the VAE in tiles (Stable Diffusion, DiT), as\n"
            "                      diffusers' pipe.vae.enable_tiling(): memory follows the tile\n"
            "  --vae-slicing       decode a batch (--num-images) one image at a time, as\n"
            "                      diffusers' pipe.vae.enable_slicing(): the same images\n"
            "  --out FILE.png      the image\n"
            "  --out-npy FILE      the image as float32 [1, H, W, C] in [0, 1]\n"
            "  --out-latents FILE  the final latents instead of the image\n"
            "                      (output_type=\"latent\"): float32 .npy [B, C, h, w]; not\n"
            "                      with --out / --out-npy\n"
            "  --class-label N     DiTPipeline: the class (ImageNet id for DiT-XL-2); a list\n"
            "                      a,b,c is one batched run, diffusers' class_labels=[a, b, c]\n"
            "                      (a grid, as --num-images; not with --num-images)\n"
            "  --init-image FILE   image to image (Stable Diffusion and SDXL, as\n"
            "                      StableDiffusion(XL)Img2ImgPipeline): a PNG, or a float32 .npy\n"
            "                      [1, H, W, 3] or [H, W, 3] in [0, 1] (what --out-npy writes); H\n"
            "                      and W multiples of the VAE's scale factor\n"
            "  --strength S        with --init-image (or --image-latents): the part of the\n"
            "                      schedule run, in (0, 1]\n"
            "                      (default 0.8; SDXL 0.3; inpainting 1.0)\n"
            "  --mask-image FILE   with --init-image, inpainting (Stable Diffusion folders, as\n"
            "                      StableDiffusionInpaintPipeline; a 9-channel inpainting UNet\n"
            "                      needs it): a PNG (made grey) or a float32 .npy [1, H, W, 1],\n"
            "                      [1, H, W] or [H, W] in [0, 1]; white (>= 0.5) is repainted\n"
            "  --num-images N      N images tiled into one PNG grid (and stacked [N, H, W, C]\n"
            "                      in --out-npy); needs --seed (--seeds sets N itself).\n"
            "                      Stable Diffusion (and SDXL, SD3): one batched\n"
            "                      run, diffusers' num_images_per_prompt=N with seed S; the\n"
            "                      other pipelines: seeds S, S+1, ..., S+N-1, one run each\n"
            "  --grid-cols K       columns of the grid (default: ceil(sqrt(N)))\n"
            "  --upscale U         enlarge the PNG U times, nearest neighbour (8x8 images are\n"
            "                      hard to see; grid cells get a gray frame of U/4 pixels);\n"
            "                      the .npy keeps the pipeline's size\n"
            "  --prompt-embeds FILE  instead of --prompt (Stable Diffusion and SDXL): float32\n"
            "                      .npy [n, L, cross_attention_dim], diffusers' prompt_embeds\n"
            "  --negative-prompt-embeds FILE  with --prompt-embeds: the unconditional half (the\n"
            "                      same shape; default: --negative-prompt encoded)\n"
            "  --pooled-prompt-embeds FILE, --negative-pooled-prompt-embeds FILE  SDXL, beside\n"
            "                      them: float32 .npy [n, projection_dim] of text_encoder_2\n"
            "  --denoising-end F   SDXL: stop before the timesteps below round(T - F * T), in\n"
            "                      (0, 1) (the base's part of the base -> refiner hand-over; with\n"
            "                      --out-latents)\n"
            "  --image-latents FILE  SDXL image to image from latents instead of --init-image:\n"
            "                      float32 .npy [1 or B, C, h, w] (what --out-latents writes),\n"
            "                      noised at the first step (--strength)\n"
            "  --denoising-start F with --image-latents (or --init-image), SDXL: start at the\n"
            "                      first timestep below round(T - F * T), in (0, 1), adding no\n"
            "                      noise (the refiner's part of the hand-over)\n");
}

static bool progress(void *user, int64_t i, int64_t n, double t, double seconds) {
    (void)user;
    fprintf(stderr, "step %lld/%lld  t=%g  %.3f s/step\n", (long long)i + 1, (long long)n, t,
            seconds);
    return true;
}

typedef struct image_args {
    em_dtype dtype; /* --dtype: f32 (0) unless given */
    const char *model, *scheduler, *device, *out, *out_npy, *latents, *init_image, *mask_image;
    const char *prompt, *negative, *text_opt; /* text_opt: the first text-to-image option */
    const char *prompt_2, *negative_2;        /* SDXL's second prompts */
    const char *xl_opt;                       /* the first SDXL-only option */
    const char *out_latents, *image_latents;  /* the hand-over's .npy files */
    const char *embeds, *negative_embeds, *pooled, *negative_pooled; /* .npy files */
    long long seeds[EM_PIPELINE_MAX_BATCH];   /* --seeds' list */
    int num_seeds;
    double denoising_end, denoising_start;
    long long steps, seed, height, width, num_images, grid_cols, upscale, max_seq, tp, cp;
    long long cp_ring, cp_ulysses; /* --cp-ring, --cp-ulysses (0: not given) */
    long long class_labels[EM_PIPELINE_MAX_BATCH]; /* --class-label's list */
    int num_class_labels;
    double eta, guidance, strength, aesthetic, negative_aesthetic;
    bool have_aesthetic, have_negative_aesthetic;
    bool have_seed, compile, have_class, have_guidance, vae_tiling, vae_slicing;
    em_cp_schedule cp_schedule; /* --cp-schedule */
} image_args;

/* 0 parsed, 1 help printed, 2 a usage error (printed). */
static int parse(int argc, char **argv, image_args *a) {
    memset(a, 0, sizeof *a);
    a->num_images = a->upscale = a->tp = a->cp = 1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        bool val = i + 1 < argc;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(o, "--prompt") && val) {
            a->prompt = argv[++i];
            if (!a->text_opt) a->text_opt = o;
        } else if (!strcmp(o, "--negative-prompt") && val) {
            a->negative = argv[++i];
            if (!a->text_opt) a->text_opt = o;
        } else if (!strcmp(o, "--prompt-2") && val) {
            a->prompt_2 = argv[++i];
            if (!a->text_opt) a->text_opt = o;
            if (!a->xl_opt) a->xl_opt = o;
        } else if (!strcmp(o, "--negative-prompt-2") && val) {
            a->negative_2 = argv[++i];
            if (!a->text_opt) a->text_opt = o;
            if (!a->xl_opt) a->xl_opt = o;
        } else if ((!strcmp(o, "--prompt-embeds") || !strcmp(o, "--negative-prompt-embeds")) &&
                   val) {
            *(o[2] == 'n' ? &a->negative_embeds : &a->embeds) = argv[++i];
            if (!a->text_opt) a->text_opt = o;
        } else if ((!strcmp(o, "--pooled-prompt-embeds") ||
                    !strcmp(o, "--negative-pooled-prompt-embeds") ||
                    !strcmp(o, "--image-latents")) && val) {
            *(o[2] == 'n' ? &a->negative_pooled : o[2] == 'p' ? &a->pooled : &a->image_latents) =
                argv[++i];
            if (!a->text_opt) a->text_opt = o;
            if (!a->xl_opt) a->xl_opt = o;
        } else if ((!strcmp(o, "--denoising-end") || !strcmp(o, "--denoising-start")) && val) {
            /* in (0, 1): 0 would be "none" and 1 keeps no step */
            double *v = o[12] == 'e' ? &a->denoising_end : &a->denoising_start;
            if (!cli_real("image", o, argv[++i], 0.0, 1.0, v)) return 2;
            if (*v <= 0.0 || *v >= 1.0) {
                fprintf(stderr, "ember image: %s must be in (0, 1), got %s\n", o, argv[i]);
                return 2;
            }
            if (!a->text_opt) a->text_opt = o;
            if (!a->xl_opt) a->xl_opt = o;
        } else if (!strcmp(o, "--out-latents") && val) {
            a->out_latents = argv[++i];
        } else if (!strcmp(o, "--seeds") && val) {
            a->num_seeds = cli_int_list("image", o, argv[++i], 0, LLONG_MAX, a->seeds,
                                        EM_PIPELINE_MAX_BATCH);
            if (a->num_seeds < 0) return 2;
        } else if ((!strcmp(o, "--height") || !strcmp(o, "--width")) && val) {
            if (!cli_int("image", o, argv[++i], 1, 1 << 16, o[2] == 'h' ? &a->height : &a->width))
                return 2;
            if (!a->text_opt) a->text_opt = o;
        } else if (!strcmp(o, "--max-sequence-length") && val) {
            if (!cli_int("image", o, argv[++i], 1, 512, &a->max_seq)) return 2;
            if (!a->text_opt) a->text_opt = o;
        } else if (!strcmp(o, "--init-image") && val) {
            a->init_image = argv[++i];
            if (!a->text_opt) a->text_opt = o;
        } else if (!strcmp(o, "--mask-image") && val) {
            a->mask_image = argv[++i];
            if (!a->text_opt) a->text_opt = o;
        } else if ((!strcmp(o, "--aesthetic-score") || !strcmp(o, "--negative-aesthetic-score")) &&
                   val) {
            bool neg = o[2] == 'n';
            if (!cli_real("image", o, argv[++i], -1e6, 1e6,
                          neg ? &a->negative_aesthetic : &a->aesthetic))
                return 2;
            *(neg ? &a->have_negative_aesthetic : &a->have_aesthetic) = true;
            if (!a->text_opt) a->text_opt = o;
        } else if (!strcmp(o, "--strength") && val) {
            if (!cli_real("image", o, argv[++i], 1e-9, 1.0, &a->strength)) return 2;
            if (!a->text_opt) a->text_opt = o;
        } else if (!strcmp(o, "--tp") && val) {
            if (!cli_int("image", o, argv[++i], 1, 4096, &a->tp)) return 2;
        } else if (!strcmp(o, "--cp") && val) {
            if (!cli_int("image", o, argv[++i], 1, 4096, &a->cp)) return 2;
        } else if (!strcmp(o, "--cp-ring") && val) {
            if (!cli_int("image", o, argv[++i], 1, 4096, &a->cp_ring)) return 2;
        } else if (!strcmp(o, "--cp-ulysses") && val) {
            if (!cli_int("image", o, argv[++i], 1, 4096, &a->cp_ulysses)) return 2;
        } else if (!strcmp(o, "--cp-schedule") && val) {
            const char *v = argv[++i];
            if (!strcmp(v, "ring")) {
                a->cp_schedule = EM_CP_RING;
            } else if (!strcmp(v, "all-gather")) {
                a->cp_schedule = EM_CP_ALL_GATHER;
            } else if (!strcmp(v, "ulysses")) {
                a->cp_schedule = EM_CP_ULYSSES;
            } else {
                fprintf(stderr, "ember image: --cp-schedule '%s': want ring, all-gather or "
                        "ulysses\n", v);
                return 2;
            }
        } else if (!strcmp(o, "--compile")) {
            a->compile = true;
        } else if (!strcmp(o, "--vae-tiling")) {
            a->vae_tiling = true;
        } else if (!strcmp(o, "--vae-slicing")) {
            a->vae_slicing = true;
        } else if (!strcmp(o, "--model") && val) {
            a->model = argv[++i];
        } else if (!strcmp(o, "--scheduler") && val) {
            a->scheduler = argv[++i];
        } else if (!strcmp(o, "--device") && val) {
            a->device = argv[++i];
        } else if (!strcmp(o, "--dtype") && val) {
            const char *d = argv[++i];
            if (!em_dtype_parse(d, &a->dtype) ||
                (a->dtype != EM_F32 && a->dtype != EM_BF16 && a->dtype != EM_F16)) {
                fprintf(stderr, "ember image: --dtype %s: f32, bf16 or f16\n", d);
                return 2;
            }
        } else if (!strcmp(o, "--out") && val) {
            a->out = argv[++i];
        } else if (!strcmp(o, "--out-npy") && val) {
            a->out_npy = argv[++i];
        } else if (!strcmp(o, "--latents") && val) {
            a->latents = argv[++i];
        } else if (!strcmp(o, "--steps") && val) {
            if (!cli_int("image", o, argv[++i], 1, 1000000, &a->steps)) return 2;
        } else if (!strcmp(o, "--eta") && val) {
            if (!cli_real("image", o, argv[++i], 0, 1e6, &a->eta)) return 2;
        } else if (!strcmp(o, "--class-label") && val) {
            a->num_class_labels = cli_int_list("image", o, argv[++i], 0, LLONG_MAX,
                                               a->class_labels, EM_PIPELINE_MAX_BATCH);
            if (a->num_class_labels < 0) return 2;
            a->have_class = true;
        } else if (!strcmp(o, "--guidance") && val) {
            if (!cli_real("image", o, argv[++i], 0, 1e6, &a->guidance)) return 2;
            a->have_guidance = true;
        } else if (!strcmp(o, "--num-images") && val) {
            if (!cli_int("image", o, argv[++i], 1, 1024, &a->num_images)) return 2;
        } else if (!strcmp(o, "--grid-cols") && val) {
            if (!cli_int("image", o, argv[++i], 1, 1024, &a->grid_cols)) return 2;
        } else if (!strcmp(o, "--upscale") && val) {
            if (!cli_int("image", o, argv[++i], 1, 64, &a->upscale)) return 2;
        } else if (!strcmp(o, "--seed") && val) {
            if (!cli_int("image", o, argv[++i], 0, LLONG_MAX, &a->seed)) return 2;
            a->have_seed = true;
        } else {
            fprintf(stderr, "ember image: unknown option '%s'%s\n\n", o,
                    o[0] == '-' && !val ? " (or its value is missing)" : "");
            usage(stderr);
            return 2;
        }
    }
    if (a->mask_image && !a->init_image) {
        fprintf(stderr, "ember image: --mask-image needs --init-image (the image it masks)\n\n");
        usage(stderr);
        return 2;
    }
    if (a->strength > 0.0 && !a->init_image && !a->image_latents) {
        fprintf(stderr, "ember image: --strength needs --init-image (or --image-latents)\n\n");
        usage(stderr);
        return 2;
    }
    /* the hand-over's and the embeddings' combinations (a usage error each, exit 2) */
    const char *bad =
        a->denoising_start && !a->init_image && !a->image_latents
            ? "--denoising-start needs --image-latents or --init-image (the image it continues)"
        : a->image_latents && (a->init_image || a->latents)
            ? "--image-latents is the init image as latents: give no --init-image or --latents"
        : a->out_latents && (a->out || a->out_npy)
            ? "--out-latents writes the latents instead of the image: give no --out or --out-npy"
        : a->embeds && (a->prompt || a->prompt_2)
            ? "--prompt-embeds replaces the prompts: give no --prompt or --prompt-2"
        : !a->embeds && (a->negative_embeds || a->pooled || a->negative_pooled)
            ? "--negative-prompt-embeds and the pooled embeddings go with --prompt-embeds"
        : a->num_seeds && a->have_seed
            ? "--seeds is a generator per image instead of --seed: give one of them"
        : a->num_seeds && a->num_images > 1 && a->num_images != a->num_seeds
            ? "--seeds gives the number of images (one seed each): --num-images, when given, "
              "must equal it"
            : NULL;
    if (bad) {
        fprintf(stderr, "ember image: %s\n", bad);
        return 2;
    }
    const char *missing = !a->model                 ? "--model"
                          : !a->out && !a->out_latents ? "--out (or --out-latents)"
                          : !a->have_seed && !a->num_seeds && !a->latents
                              ? "--seed, --seeds or --latents"
                              : NULL;
    if (missing) {
        fprintf(stderr, "ember image: %s is required\n\n", missing);
        usage(stderr);
        return 2;
    }
    if (a->num_seeds) a->num_images = 1; /* the batch is the seeds' */
    if (a->num_images > 1 && (!a->have_seed || a->latents)) {
        fprintf(stderr, "ember image: --num-images draws its images from the seed: give --seed "
                        "and no --latents\n");
        return 2;
    }
    if (a->num_images > 1 && a->num_class_labels > 1) {
        fprintf(stderr, "ember image: a list of --class-label values is the batch (an image "
                        "per label): give no --num-images with it\n");
        return 2;
    }
    return 0;
}

/* --init-image: a PNG, or a .npy of [1, H, W, 3] or [H, W, 3] (a batch of one) */
static em_tensor *init_image(em_ctx *c, const char *path) {
    size_t n = strlen(path);
    bool png = n >= 4 && !strcasecmp(path + n - 4, ".png");
    em_tensor *t = png ? em_png_read(c, path) : em_npy_load_f32(c, "image", path);
    if (t && em_tensor_ndim(t) == 3)
        t = em_reshape(c, t, 4, (const int64_t[]){1, em_tensor_dim(t, 0), em_tensor_dim(t, 1),
                                                  em_tensor_dim(t, 2)});
    return t;
}

/* --mask-image: a PNG turned to grey as PIL's convert("L") does (diffusers' mask processor), or
 * a .npy of [1, H, W, 1], [1, H, W] or [H, W]; [1, H, W] in [0, 1] either way */
static em_tensor *mask_image(em_ctx *c, const char *path) {
    size_t n = strlen(path);
    bool png = n >= 4 && !strcasecmp(path + n - 4, ".png");
    em_tensor *t = png ? em_png_read(c, path) : em_npy_load_f32(c, "image", path);
    if (!t) return NULL;
    int nd = em_tensor_ndim(t);
    const int64_t *s = em_tensor_shape(t);
    if (png) { /* [H, W, 3] of k / 255: L = (19595 R + 38470 G + 7471 B + 2^15) >> 16 */
        int64_t h = s[0], w = s[1];
        float *v = malloc((size_t)(h * w * 3) * sizeof *v);
        em_tensor *g = NULL;
        if (v && em_to_host_f32(c, t, v, h * w * 3) == EM_OK) {
            for (int64_t i = 0; i < h * w; i++) {
                unsigned r = (unsigned)lrintf(v[3 * i] * 255.0f);
                unsigned gr = (unsigned)lrintf(v[3 * i + 1] * 255.0f);
                unsigned b = (unsigned)lrintf(v[3 * i + 2] * 255.0f);
                v[i] = (float)((r * 19595u + gr * 38470u + b * 7471u + 0x8000u) >> 16) / 255.0f;
            }
            g = em_from_host(c, EM_F32, 3, (const int64_t[]){1, h, w}, v);
        }
        free(v);
        return g;
    }
    if (nd == 2) return em_reshape(c, t, 3, (const int64_t[]){1, s[0], s[1]});
    if (nd == 4 && s[3] == 1) return em_reshape(c, t, 3, (const int64_t[]){s[0], s[1], s[2]});
    return t; /* the pipeline names any other shape */
}

/* The .npy inputs of the hand-over and the embeddings options (float32, any shape: the pipeline
 * checks them) into rp, errors naming the option; false with the error in c. */
static bool npy_inputs(em_ctx *c, const image_args *a, em_pipeline_run_params *rp) {
    const struct {
        const char *opt, *path;
        em_tensor **t;
    } in[] = {
        {"--image-latents", a->image_latents, &rp->image_latents},
        {"--prompt-embeds", a->embeds, &rp->prompt_embeds},
        {"--negative-prompt-embeds", a->negative_embeds, &rp->negative_prompt_embeds},
        {"--pooled-prompt-embeds", a->pooled, &rp->pooled_prompt_embeds},
        {"--negative-pooled-prompt-embeds", a->negative_pooled,
         &rp->negative_pooled_prompt_embeds},
    };
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        if (in[i].path && !(*in[i].t = em_npy_load_f32(c, in[i].opt, in[i].path))) return false;
    return true;
}

/* n images stacked [n, H, W, C]: Stable Diffusion's one batched run (num_images_per_prompt,
 * set by the caller), else n runs with seeds rp->seed, rp->seed + 1, ... */
static em_tensor *run_images(em_ctx *c, em_pipeline *p, em_pipeline_run_params *rp,
                             long long n) {
    if (n == 1 || rp->num_images_per_prompt > 1) return em_pipeline_run(c, p, rp);
    /* the runs' images gathered on the host: em_cat takes 64 tensors at most */
    uint64_t seed = rp->seed;
    float *all = NULL;
    int64_t shape[4] = {0}, numel = 0;
    em_tensor *out = NULL;
    long long i = 0;
    for (; i < n; i++) {
        rp->seed = seed + (uint64_t)i;
        fprintf(stderr, "image %lld/%lld (seed %llu)\n", i + 1, n, (unsigned long long)rp->seed);
        em_scope_push(c);
        em_tensor *img = em_pipeline_run(c, p, rp);
        if (img && !all) {
            memcpy(shape, em_tensor_shape(img), sizeof shape);
            numel = em_tensor_numel(img);
            if (!(all = malloc((size_t)(numel * n) * sizeof *all)))
                em_ctx_fail(c, EM_ERR_OOM, "image", "out of memory");
        }
        bool ok = img && all && em_to_host_f32(c, img, all + i * numel, numel) == EM_OK;
        em_scope_pop(c);
        if (!ok) break;
    }
    shape[0] = n;
    if (i == n) out = em_from_host(c, EM_F32, 4, shape, all);
    free(all);
    return out;
}

/* images [N, H, W, C] enlarged u times (nearest neighbour) for the PNG; with several images
 * each gets a gray frame of u/4 pixels so that neighbours in the grid do not run together. */
static em_tensor *upscale(em_ctx *c, em_tensor *img, long long u) {
    if (u == 1 || !img) return img;
    const int64_t *s = em_tensor_shape(img);
    int64_t n = s[0], h = s[1], w = s[2], ch = s[3], numel = em_tensor_numel(img);
    int64_t pad = n > 1 ? u / 4 : 0, H = h * u + 2 * pad, W = w * u + 2 * pad;
    float *src = malloc((size_t)numel * sizeof *src);
    float *dst = malloc((size_t)(n * H * W * ch) * sizeof *dst);
    em_tensor *out = NULL;
    if (src && dst && em_to_host_f32(c, img, src, numel) == EM_OK) {
        for (int64_t b = 0; b < n; b++)
            for (int64_t y = 0; y < H; y++)
                for (int64_t x = 0; x < W; x++) {
                    float *d = dst + ((b * H + y) * W + x) * ch;
                    int64_t sy = y - pad, sx = x - pad;
                    if (sy < 0 || sx < 0 || sy >= h * u || sx >= w * u) {
                        for (int64_t k = 0; k < ch; k++) d[k] = 0.5f;
                        continue;
                    }
                    memcpy(d, src + ((b * h + sy / u) * w + sx / u) * ch, (size_t)ch * sizeof *d);
                }
        out = em_from_host(c, EM_F32, 4, (int64_t[]){n, H, W, ch}, dst);
    } else if (!src || !dst) {
        em_ctx_fail(c, EM_ERR_OOM, "image", "out of memory");
    }
    free(src);
    free(dst);
    return out;
}

/* One run: with a tensor-parallel group every rank runs it; only the speaking rank (rank 0)
 * prints and writes. With --tp T and --cp C, g's T x C ranks as the mesh (C, T): tensor
 * parallelism over T consecutive ranks, context parallelism across them. */
static int run_split(em_ctx *c, const image_args *a, em_dist *g, em_dist *tp, em_dist *cp,
                     bool speak) {
    em_pipeline_options po = em_pipeline_default_options();
    po.device = g && em_dist_device(g) ? em_device_name(em_dist_device(g)) : a->device;
    po.tp = tp;
    po.cp = cp;
    po.cp_schedule = a->cp_schedule;
    po.cp_ring_degree = (int)a->cp_ring;
    po.cp_ulysses_degree = (int)a->cp_ulysses;
    po.dtype = a->dtype;
    em_pipeline *p = em_pipeline_load(c, a->model, &po);
    if (!p) return 1;
    if (po.cp && speak && po.cp_ring_degree > 1 && po.cp_ulysses_degree > 1)
        fprintf(stderr, "context parallelism: degree %d, each rank 1/%d of the image's tokens, "
                "ring %d x ulysses %d attention\n", em_dist_world_size(po.cp),
                em_dist_world_size(po.cp), po.cp_ring_degree, po.cp_ulysses_degree);
    else if (po.cp && speak)
        fprintf(stderr, "context parallelism: degree %d, each rank 1/%d of the image's tokens, "
                "%s attention\n", em_dist_world_size(po.cp), em_dist_world_size(po.cp),
                po.cp_ring_degree == 1 && po.cp_ulysses_degree > 1 ? "ulysses"
                : po.cp_schedule == EM_CP_RING     ? "ring"
                : po.cp_schedule == EM_CP_ALL_GATHER ? "all-gather"
                                                     : "ulysses");
    if (tp && speak) {
        int64_t heads, hd; /* the transformer's, whichever pipeline holds one */
        if (em_pipeline_sd3(p)) {
            heads = em_sd3_get_config(em_pipeline_sd3(p))->num_attention_heads;
            hd = em_sd3_get_config(em_pipeline_sd3(p))->attention_head_dim;
        } else if (em_pipeline_flux(p)) {
            heads = em_flux_get_config(em_pipeline_flux(p))->num_attention_heads;
            hd = em_flux_get_config(em_pipeline_flux(p))->attention_head_dim;
        } else {
            heads = em_dit_get_config(em_pipeline_dit(p))->num_attention_heads;
            hd = em_dit_get_config(em_pipeline_dit(p))->attention_head_dim;
        }
        int n = em_dist_world_size(tp);
        fprintf(stderr, "tensor parallelism: degree %d, per rank and block %lld of %lld "
                "attention heads and %lld of %lld feed-forward channels\n", n,
                (long long)(heads / n), (long long)heads, (long long)(4 * heads * hd / n),
                (long long)(4 * heads * hd));
    }
    int rc = 1;
    em_scope_push(c);
    em_pipeline_run_params rp = em_pipeline_default_params();
    rp.steps = a->steps;
    rp.eta = a->eta;
    rp.seed = (uint64_t)a->seed;
    uint64_t seeds[EM_PIPELINE_MAX_BATCH];
    for (int i = 0; i < a->num_seeds; i++) seeds[i] = (uint64_t)a->seeds[i];
    if (a->num_seeds) {
        rp.seeds = seeds;
        rp.num_seeds = a->num_seeds;
    }
    /* one label is class_labels=[N]; a list, DiT's batch */
    int64_t labels[EM_PIPELINE_MAX_BATCH];
    for (int i = 0; i < a->num_class_labels; i++) labels[i] = (int64_t)a->class_labels[i];
    rp.class_label = a->num_class_labels == 1 ? labels[0] : -1;
    if (a->num_class_labels > 1) {
        rp.class_labels = labels;
        rp.num_class_labels = a->num_class_labels;
    }
    /* an explicit 0 is "no guidance", which the run parameters spell <= 1 (0: the pipeline's
     * default) */
    rp.guidance_scale = !a->have_guidance ? 0.0 : a->guidance > 0.0 ? a->guidance : 1.0;
    const em_pipeline_index *idx = em_pipeline_get_index(p);
    bool sd = idx->pipeline == EM_PIPELINE_STABLE_DIFFUSION ||
              idx->pipeline == EM_PIPELINE_STABLE_DIFFUSION_XL,
         dit = idx->pipeline == EM_PIPELINE_DIT,
         sd3 = idx->pipeline == EM_PIPELINE_STABLE_DIFFUSION_3,
         flux = idx->pipeline == EM_PIPELINE_FLUX, text = sd || sd3 || flux;
    /* Stable Diffusion batches its images in one run (a line per step); the others run once
     * per image (a line per image instead) */
    if (text) rp.num_images_per_prompt = a->num_images;
    /* --seeds: one batched run of an image per seed (DiT's batch is its labels') */
    if (a->num_seeds && !dit) rp.num_images_per_prompt = a->num_seeds;
    rp.progress = (a->num_images > 1 && !text) || !speak ? NULL : progress;
    rp.prompt = a->prompt;
    rp.negative_prompt = a->negative;
    if (a->have_aesthetic) rp.aesthetic_score = a->aesthetic;
    if (a->have_negative_aesthetic) rp.negative_aesthetic_score = a->negative_aesthetic;
    rp.prompt_2 = a->prompt_2;
    rp.negative_prompt_2 = a->negative_2;
    rp.height = a->height;
    rp.width = a->width;
    rp.max_sequence_length = a->max_seq;
    em_compile_stats cs = {0};
    rp.compile = a->compile;
    rp.vae_tiling = a->vae_tiling;
    rp.vae_slicing = a->vae_slicing;
    rp.compile_stats = &cs;
    rp.denoising_end = a->denoising_end;
    rp.denoising_start = a->denoising_start;
    rp.output_latents = a->out_latents != NULL;
    em_scheduler_kind kind;
    const char *wrong = NULL, *why = "";
    if (!text && a->text_opt)
        wrong = a->text_opt, why = dit ? "a class-conditional pipeline: --class-label" : NULL;
    else if (a->max_seq && !sd3 && !flux)
        wrong = "--max-sequence-length", why = "the T5 tokens of StableDiffusion3Pipeline "
                                                "and FluxPipeline";
    else if (flux && (a->negative || (a->xl_opt && !strcmp(a->xl_opt, "--negative-prompt-2"))))
        wrong = a->negative ? "--negative-prompt" : "--negative-prompt-2",
        why = "guidance is embedded in the transformer; true_cfg_scale is not run";
    else if (!dit && a->have_class)
        wrong = "--class-label", why = text ? "a text-to-image pipeline: --prompt" : NULL;
    else if (!text && !dit && a->have_guidance)
        wrong = "--guidance", why = NULL;
    if (wrong) {
        fprintf(stderr, "ember image: %s is not supported for %s (%s)\n", wrong, idx->class_name,
                why ? why : "an unconditional pipeline");
        rc = 2;
    } else if (a->xl_opt && idx->pipeline != EM_PIPELINE_STABLE_DIFFUSION_XL &&
               !(sd3 && (!strcmp(a->xl_opt, "--prompt-2") ||
                         !strcmp(a->xl_opt, "--negative-prompt-2"))) &&
               !(flux && !strcmp(a->xl_opt, "--prompt-2"))) {
        /* a usage error, as the options the other pipelines do not take (SD3 takes the second
         * prompts; the C API refuses what else it lacks) */
        bool second = !strcmp(a->xl_opt, "--prompt-2") || !strcmp(a->xl_opt, "--negative-prompt-2");
        fprintf(stderr, "ember image: %s is not supported for %s (%s)\n", a->xl_opt,
                idx->class_name,
                second ? "the second text encoder's prompt: StableDiffusionXLPipeline's, "
                         "StableDiffusion3Pipeline's and FluxPipeline's text_encoder_2"
                       : "StableDiffusionXLPipeline's: the base -> refiner hand-over and the "
                         "pooled embeddings of text_encoder_2");
        rc = 2;
    } else if (text && !a->prompt && !a->embeds) {
        fprintf(stderr, "ember image: %s needs --prompt (\"\" is one) or --prompt-embeds\n",
                idx->class_name);
        rc = 2;
    } else if (a->scheduler && !em_scheduler_kind_parse(a->scheduler, &kind)) {
        fprintf(stderr, "ember image: --scheduler '%s' is not one of ddpm ddim pndm euler "
                        "euler-a dpm++2m flow-euler\n", a->scheduler);
        rc = 2;
    } else if ((!a->scheduler || em_pipeline_set_scheduler(c, p, kind) == EM_OK) &&
               (!a->latents || (rp.latents = em_npy_load_f32(c, "image", a->latents))) &&
               (!a->init_image || (rp.image = init_image(c, a->init_image))) &&
               (!a->mask_image || (rp.mask_image = mask_image(c, a->mask_image))) &&
               npy_inputs(c, a, &rp)) {
        rp.strength = a->strength;
        if (speak)
            fprintf(stderr, "%s from %s: %s, %s\n", em_pipeline_get_index(p)->class_name, a->model,
                em_scheduler_kind_class(em_scheduler_get_kind(em_pipeline_scheduler(p))),
                em_device_name(em_pipeline_device(p)));
        em_tensor *img = run_images(c, p, &rp, a->num_images);
        if (img && !speak) { /* another rank of the group: rank 0 writes */
            rc = 0;
        } else if (img && a->out_latents) {
            if (em_npy_save_f32(c, "image", a->out_latents, img) == EM_OK) {
                const int64_t *s = em_tensor_shape(img);
                fprintf(stderr, "wrote %s (latents [%lld, %lld, %lld, %lld])\n", a->out_latents,
                        (long long)s[0], (long long)s[1], (long long)s[2], (long long)s[3]);
                rc = 0;
            }
        } else if (img && /* the .npy first: a build without libpng still writes it */
                   (!a->out_npy || em_npy_save_f32(c, "image", a->out_npy, img) == EM_OK) &&
                   em_png_write_tensor(c, a->out, upscale(c, img, a->upscale),
                                       em_tensor_dim(img, 0) > 1 ? (int)a->grid_cols : 1) ==
                       EM_OK) {
            const int64_t *s = em_tensor_shape(img);
            fprintf(stderr, "wrote %s (%lld image%s of %lldx%lld)%s%s\n", a->out,
                    (long long)s[0], s[0] > 1 ? "s" : "", (long long)s[2], (long long)s[1],
                    a->out_npy ? " and " : "", a->out_npy ? a->out_npy : "");
            rc = 0;
        }
        if (img && a->compile && speak)
            fprintf(stderr, "compile mode: %lld program(s) compiled in %.1f ms for %lld steps "
                    "(%s)\n", (long long)cs.compiles, cs.compile_ms,
                    (long long)cs.calls, cs.backend);
    }
    em_scope_pop(c);
    em_pipeline_free(p);
    return rc;
}

static int run(em_ctx *c, const image_args *a, em_dist *g, bool speak) {
    if (!g || a->tp <= 1 || a->cp <= 1)
        return run_split(c, a, g, a->cp > 1 ? NULL : g, a->cp > 1 ? g : NULL, speak);
    em_dist *tp = NULL, *cp = NULL;
    if (em_dist_mesh2d(c, g, (int)a->cp, (int)a->tp, &cp, &tp)) return 1;
    int rc = run_split(c, a, g, tp, cp, speak);
    em_dist_free(tp);
    em_dist_free(cp);
    return rc;
}

/* A rank of a --tp N device group (cli_device_group): the run on its device. */
static int group_rank(void *arg, em_ctx *c, em_dist *g, bool speak) {
    return run(c, arg, g, speak);
}

/* --tp N or --cp N over a device group or the ranks of mpirun, or neither */
static int run_in_group(em_ctx *c, const image_args *a) {
    char kind[64] = "";
    if (a->device) snprintf(kind, sizeof kind, "%.*s", (int)strcspn(a->device, ":"), a->device);
    if ((a->cp_ring || a->cp_ulysses) && (!a->cp_ring || !a->cp_ulysses || a->cp <= 1 ||
                                          a->cp_ring * a->cp_ulysses != a->cp)) {
        fprintf(stderr, "ember image: --cp-ring %lld --cp-ulysses %lld with --cp %lld: give "
                "both, with --cp their product\n", a->cp_ring, a->cp_ulysses, a->cp);
        return 2;
    }
    long long n = a->tp * a->cp;
    char opt[96]; /* what was asked, for the messages: "--cp 4", "--tp 2 --cp 2 (4 ranks)" */
    if (a->tp > 1 && a->cp > 1)
        snprintf(opt, sizeof opt, "--tp %lld --cp %lld (%lld ranks)", a->tp, a->cp, n);
    else
        snprintf(opt, sizeof opt, "%s %lld", a->cp > 1 ? "--cp" : "--tp", n);
    if (n > 1 && kind[0] && strcmp(kind, "cpu")) /* N devices of this process */
        return cli_device_group(c, a->tp > 1 && a->cp > 1 ? "image --tp --cp"
                                   : a->cp > 1                ? "image --cp"
                                                              : "image --tp",
                                kind, (int)n,
                                group_rank, (void *)a);
    if (n <= 1) return run(c, a, NULL, true);
    em_dist *group = NULL; /* the ranks of mpirun: each holds its share, rank 0 speaks */
    if (em_dist_init(c, NULL, &group) != EM_OK) {
        fprintf(stderr, "ember image: %s: %s\n", opt, em_ctx_error(c)->message);
        return 1;
    }
    if (em_dist_world_size(group) != n) {
        fprintf(stderr, "ember image: %s but %d process(es) were started: launch with "
                "mpirun -np %lld\n", opt, em_dist_world_size(group), n);
        em_dist_free(group);
        return 2;
    }
    int rc = run(c, a, group, em_dist_rank(group) == 0);
    em_dist_free(group);
    return rc;
}

int cmd_image(int argc, char **argv) {
    image_args a;
    int r = parse(argc, argv, &a);
    if (r) return r == 1 ? 0 : 2;
    em_ctx *c = em_ctx_create();
    if (!c) return 1;
    int rc = run_in_group(c, &a);
    if (rc == 1)
        fprintf(stderr, "ember image: %s\n",
                em_ctx_error(c) ? em_ctx_error(c)->message : "failed");
    em_ctx_free(c);
    return rc;
}
