/* StableDiffusionInpaintPipeline's own pieces (diffusers 0.42, pipelines/stable_diffusion/
 * pipeline_stable_diffusion_inpaint.py): the mask processor (binarised at 0.5, white
 * repainted), prepare_latents with the init image, prepare_mask_latents (the mask resized to the
 * latents by nearest neighbour, the masked image encoded) and the 4-channel UNet's blend after
 * each step. The prompt, the loop and the decode are Stable Diffusion's (pipeline_sd.c,
 * pipeline.c). */
#include <stdlib.h>

#include "diffusion/pipeline_impl.h"

#define OP "StableDiffusionInpaintPipeline"

void sd_inpaint_free(sd_inpaint *ip) {
    em_tensor *const all[] = {ip->mask, ip->masked, ip->mask1, ip->image_latents, ip->noise};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) em_tensor_release(all[i]);
    *ip = (sd_inpaint){0};
}

/* The mask f32 [1, H, W] or [1, H, W, 1] (H, W the image's) binarised as the mask processor
 * does (do_binarize: 0 below 0.5, else 1): [1, 1, H, W] on dev, current scope. */
static em_tensor *mask_condition(em_ctx *c, em_tensor *mask, int64_t h, int64_t w,
                                 em_device *dev) {
    char sig[96];
    const int64_t *s = em_tensor_shape(mask);
    int nd = em_tensor_ndim(mask);
    if (!((nd == 3 || (nd == 4 && s[3] == 1)) && s[0] == 1 && s[1] == h && s[2] == w)) {
        em_ctx_fail(c, EM_ERR_SHAPE, OP, "the mask image is %s: it must be [1, %lld, %lld] or "
                    "[1, %lld, %lld, 1] (one channel, the init image's size; white is "
                    "repainted)", em_tensor_sig(mask, sig, sizeof sig), (long long)h, (long long)w,
                    (long long)h, (long long)w);
        return NULL;
    }
    if (em_tensor_dtype(mask) != EM_F32) {
        em_ctx_fail(c, EM_ERR_DTYPE, OP, "the mask image is %s: it must be f32",
                    em_tensor_sig(mask, sig, sizeof sig));
        return NULL;
    }
    float *v = malloc((size_t)(h * w) * sizeof *v);
    if (!v) {
        em_ctx_fail(c, EM_ERR_OOM, OP, "out of memory");
        return NULL;
    }
    em_tensor *out = NULL;
    if (em_to_host_f32(c, mask, v, h * w) == EM_OK) {
        for (int64_t i = 0; i < h * w; i++) v[i] = v[i] < 0.5f ? 0.0f : 1.0f;
        out = em_from_host_on(c, dev, EM_F32, 4, (int64_t[]){1, 1, h, w}, v);
    }
    free(v);
    return out;
}

/* [x; x] under guidance */
static em_tensor *twice(em_ctx *c, em_tensor *x, bool cfg) {
    em_tensor *pair[2] = {x, x};
    return cfg && x ? em_cat(c, pair, 2, 0) : x;
}

static em_tensor *on(em_ctx *c, em_tensor *x, em_device *dev) {
    return x && em_tensor_device(x) != dev ? em_to(c, x, dev) : x;
}

static em_tensor *keep(em_tensor *x) { return x ? em_tensor_retain(x) : NULL; }

em_tensor *sd_inpaint_prepare(em_ctx *c, em_pipeline *p, const em_pipeline_run_params *rp,
                              em_torch_generator *g, double t, double strength, bool cfg,
                              sd_inpaint *ip) {
    *ip = (sd_inpaint){0};
    const em_unet2d_config *u = em_unet2d_get_config(p->unet);
    const em_vae_config *vc = em_vae_get_config(p->vae);
    ip->nine = u->in_channels != vc->latent_channels;
    int64_t batch = sd_batch(rp), f = (int64_t)1 << (vc->n_blocks - 1);
    em_device *udev = em_unet2d_device(p->unet), *vdev = em_vae_device(p->vae);
    em_tensor *init = sd_image_input(c, p, rp->image, rp->height, rp->width);
    if (!init) return NULL;
    int64_t H = em_tensor_dim(init, 2), W = em_tensor_dim(init, 3);
    int64_t shape[4] = {batch, vc->latent_channels, H / f, W / f};
    bool pure = strength == 1.0; /* is_strength_max */
    em_scope_push(c);
    /* prepare_latents: the init image's latents when the blend needs them or the noise is
     * mixed into them, then the noise */
    em_tensor *image_latents = NULL;
    if (!ip->nine || !pure) {
        /* _encode_vae_image loops over the image's one row: a list's generator 0 alone */
        image_latents = sd_encode_sample(c, p, init, g, rp->vae_tiling, 1);
        if (image_latents && batch > 1) image_latents = em_repeat_interleave(c, image_latents, batch, 0);
        image_latents = on(c, image_latents, udev);
    }
    em_tensor *noise = em_ctx_status(c) ? NULL : em_torch_randn(c, g, 4, shape, udev);
    em_tensor *x = NULL;
    if (noise)
        x = pure ? em_mul_scalar(c, noise, em_scheduler_init_noise_sigma(p->sched))
                 : em_scheduler_add_noise(c, p->sched, image_latents, noise, t);
    /* prepare_mask_latents: init_image * (mask < 0.5) encoded (another draw, whichever UNet),
     * the mask resized to the latents by F.interpolate's default nearest */
    em_tensor *cond = x ? mask_condition(c, rp->mask_image, H, W, vdev) : NULL;
    em_tensor *masked = NULL;
    if (cond) {
        em_tensor *keep_px = em_add_scalar(c, em_mul_scalar(c, cond, -1.0), 1.0);
        masked = sd_encode_sample(c, p, em_mul(c, init, keep_px), g, rp->vae_tiling, 1);
    }
    em_tensor *mask = masked ? em_upsample_nearest(c, on(c, cond, udev), H / f, W / f) : NULL;
    if (mask && batch > 1) {
        mask = em_repeat_interleave(c, mask, batch, 0);
        masked = em_repeat_interleave(c, masked, batch, 0);
    }
    masked = on(c, masked, udev);
    if (mask && masked) {
        if (ip->nine) {
            ip->mask = keep(twice(c, mask, cfg));
            ip->masked = keep(twice(c, masked, cfg));
        } else {
            ip->mask1 = keep(mask);
            ip->image_latents = keep(image_latents);
            ip->noise = keep(noise);
        }
    }
    bool ok = !em_ctx_status(c) && (ip->nine ? ip->mask && ip->masked
                                             : ip->mask1 && ip->image_latents && ip->noise);
    x = ok ? keep(x) : NULL;
    em_scope_pop(c);
    if (!x) sd_inpaint_free(ip);
    return x;
}

em_tensor *sd_inpaint_blend(em_ctx *c, em_pipeline *p, const sd_inpaint *ip, em_tensor *x,
                            const double *ts, int64_t i, int64_t n) {
    if (ip->nine || !x) return x;
    em_scope_push(c);
    em_tensor *proper = ip->image_latents;
    if (i < n - 1) proper = em_scheduler_add_noise(c, p->sched, proper, ip->noise, ts[i + 1]);
    /* (1 - init_mask) * init_latents_proper + init_mask * latents */
    em_tensor *inv = em_add_scalar(c, em_mul_scalar(c, ip->mask1, -1.0), 1.0);
    em_tensor *y = em_add(c, em_mul(c, inv, proper), em_mul(c, ip->mask1, x));
    y = keep(y);
    em_scope_pop(c);
    em_tensor_release(x);
    return y;
}
