/*
 * Backpropagation through a whole UNet2DModel forward (the tiny models of
 * tests/fixtures/diffusion) against torch.autograd (scripts/gen_unet_grad_fixtures.py): the
 * gradient of sum(out * grad_out) with respect to the sample and to one parameter of each kind
 * (convolutions, group norms, the time embedding, attention, the up/downsamplers' convs), so
 * every op the forward records has a backward rule and they compose. The reference is f64; Ember
 * runs in f32: 1e-4 absolute + 1e-4 relative.
 */
#include <stdio.h>
#include <string.h>

#include "diffusion/unet_impl.h"
#include "ember/ember.h"
#include "harness.h"

/* model, its folder (a pipeline's unet or a bare component) */
static const struct {
    const char *name, *dir;
} MODELS[] = {
    {"ddpm_attn", "ddpm_attn/unet"},   {"ddpm_scale_shift", "ddpm_scale_shift/unet"},
    {"ddim_three", "ddim_three/unet"}, {"unet_class", "unet_class"},
    {"unet_fourier", "unet_fourier"},
};

/* The Ember tensor of a diffusers parameter name (NULL: the model has none). */
static em_tensor *param(em_unet2d *u, const char *name) {
    const unet_param *p = NULL;
    bool bias = strstr(name, ".bias") != NULL;
    if (!strncmp(name, "conv_in.", 8)) p = &u->conv_in;
    else if (!strncmp(name, "time_embedding.linear_1.", 24)) p = &u->time_l1;
    else if (!strncmp(name, "down_blocks.0.resnets.0.norm1.", 30)) p = &u->down[0].res[0].norm1;
    else if (!strncmp(name, "down_blocks.0.resnets.0.conv1.", 30)) p = &u->down[0].res[0].conv1;
    else if (!strncmp(name, "down_blocks.0.downsamplers.0.conv.", 34)) p = &u->down[0].conv;
    else if (!strncmp(name, "mid_block.attentions.0.to_q.", 28))
        p = u->mid.attn ? &u->mid.attn[0].q : NULL;
    else if (!strncmp(name, "mid_block.attentions.0.group_norm.", 34))
        p = u->mid.attn ? &u->mid.attn[0].norm : NULL;
    else if (!strncmp(name, "up_blocks.0.upsamplers.0.conv.", 30)) p = &u->up[0].conv;
    else if (!strncmp(name, "up_blocks.0.resnets.0.conv_shortcut.", 36))
        p = &u->up[0].res[0].shortcut;
    else if (!strncmp(name, "conv_norm_out.", 14)) p = &u->norm_out;
    else if (!strncmp(name, "conv_out.", 9)) p = &u->conv_out;
    return p ? (bias ? p->b : p->w) : NULL;
}

static const char *PARAMS[] = {
    "conv_in.weight", "conv_in.bias", "time_embedding.linear_1.weight",
    "down_blocks.0.resnets.0.norm1.weight", "down_blocks.0.resnets.0.norm1.bias",
    "down_blocks.0.resnets.0.conv1.weight", "down_blocks.0.downsamplers.0.conv.weight",
    "mid_block.attentions.0.to_q.weight", "mid_block.attentions.0.group_norm.weight",
    "up_blocks.0.upsamplers.0.conv.weight", "up_blocks.0.resnets.0.conv_shortcut.weight",
    "conv_norm_out.weight", "conv_norm_out.bias", "conv_out.weight", "conv_out.bias",
};
#define N_PARAMS (int)(sizeof PARAMS / sizeof PARAMS[0])

static void check_model(em_ctx *c, em_test_bundle *b, int m) {
    char key[160], what[200];
    const char *name = MODELS[m].name;
    em_unet2d *u = em_unet2d_load(c, em_test_fixture_path("diffusion", MODELS[m].dir), NULL);
    CHECK_MSG(u != NULL, "%s: %s", name, em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (!u) {
        em_ctx_clear_error(c);
        return;
    }
    em_scope_push(c);
    snprintf(key, sizeof key, "%s/sample", name);
    em_tensor *x = em_test_bundle_get(b, c, key);
    snprintf(key, sizeof key, "%s/t", name);
    em_tensor *t = em_test_bundle_get(b, c, key);
    em_tensor *labels = NULL;
    if (em_unet2d_get_config(u)->class_embedding != EM_UNET2D_CLASS_NONE) {
        snprintf(key, sizeof key, "%s/class_labels", name);
        labels = em_test_bundle_get(b, c, key);
    }
    snprintf(key, sizeof key, "%s/grad_out", name);
    em_tensor *gout = em_test_bundle_get(b, c, key);
    em_tensor *ps[N_PARAMS] = {0};
    em_tensor_requires_grad(c, x, true);
    for (int k = 0; k < N_PARAMS; k++)
        if ((ps[k] = param(u, PARAMS[k]))) em_tensor_requires_grad(c, ps[k], true);
    em_grad_enable(c, true);
    em_tensor *out = em_unet2d_forward(c, u, x, t, labels);
    em_grad_enable(c, false);
    CHECK_MSG(out && em_backward_grad(c, out, gout) == EM_OK, "%s: %s", name,
              em_ctx_error(c) ? em_ctx_error(c)->message : "");
    if (!em_ctx_status(c)) {
        snprintf(key, sizeof key, "%s/grad/sample", name);
        snprintf(what, sizeof what, "%s: d/d sample", name);
        em_test_allclose(c, em_tensor_grad(x), em_test_bundle_get(b, c, key), 1e-4, 1e-4, what);
        for (int k = 0; k < N_PARAMS; k++) {
            if (!ps[k]) continue;
            snprintf(key, sizeof key, "%s/grad/%s", name, PARAMS[k]);
            snprintf(what, sizeof what, "%s: d/d %s", name, PARAMS[k]);
            em_tensor *g = em_tensor_grad(ps[k]);
            CHECK_MSG(g != NULL, "%s got no gradient", what);
            if (g) em_test_allclose(c, g, em_test_bundle_get(b, c, key), 1e-4, 1e-4, what);
        }
    }
    em_ctx_clear_error(c);
    em_grad_tape_clear(c);
    em_scope_pop(c);
    em_unet2d_free(u);
}

static void test_unet_grad_matches_torch(void) {
    em_test_bundle *b = em_test_bundle_load("diffusion/unet_grad_ref");
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    for (int m = 0; m < (int)(sizeof MODELS / sizeof MODELS[0]); m++) check_model(c, b, m);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

EM_TEST_MAIN(T(test_unet_grad_matches_torch))
