/* A generator per image (scripts/gen_generator_list_fixtures.py): rp.seeds against diffusers'
 * generator=[torch.Generator("cpu").manual_seed(s) for s in seeds] on the tiny folders — Stable
 * Diffusion with Euler ancestral's per-step noise, two prompts, image to image (row i's
 * posterior from generator i), inpainting (the image's posterior from generator 0 alone) and an
 * unconditional DDPM batch — within 1e-3; the list generator's draws against single ones; and
 * the refusals. */
#include <stdio.h>
#include <string.h>

#include "ember/ember.h"
#include "sd_pipeline_test.h"

/* scripts/gen_generator_list_fixtures.py's RUNS */
typedef struct run {
    const char *name, *folder, *scheduler, *prompt, *prompts[2];
    uint64_t seeds[3];
    int64_t nseeds, steps, per;
    double guidance, strength;
    bool image, mask;
} run;

static const run RUNS[] = {
    {"sd_list", "sd_tiny", "euler-a", "a photo of a cat", {0}, {5, 7}, 2, 3, 2, 7.5, 0, 0, 0},
    {"sd_prompts", "sd_tiny", NULL, NULL, {"a red cube", "a boat"}, {11, 3}, 2, 3, 1, 5.0, 0, 0, 0},
    {"img2img_list", "sd_tiny", "euler-a", "an astronaut", {0}, {13, 17}, 2, 5, 2, 4.0, 0.6, 1, 0},
    {"inpaint_list", "sd_inpaint_tiny", "euler", "a tree", {0}, {19, 23}, 2, 4, 2, 5.0, 0.6, 1, 1},
    {"ddpm_list", "ddpm_attn", NULL, NULL, {0}, {1, 2, 3}, 3, 5, 3, 0, 0, 0, 0},
};

static void test_generator_list_matches_diffusers(void) {
    em_test_bundle *b = em_test_bundle_load("diffusion/generator_list_ref");
    CHECK(b != NULL);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    for (size_t i = 0; i < sizeof RUNS / sizeof RUNS[0]; i++) {
        const run *r = &RUNS[i];
        em_pipeline *p = em_pipeline_load(c, em_test_fixture_path("diffusion", r->folder), NULL);
        CHECK_MSG(p != NULL, "%s: %s", r->folder, msg(c));
        if (!p) continue;
        em_scheduler_kind kind;
        if (r->scheduler) {
            CHECK(em_scheduler_kind_parse(r->scheduler, &kind));
            CHECK_MSG(em_pipeline_set_scheduler(c, p, kind) == EM_OK, "%s", msg(c));
        }
        char name[64];
        em_scope_push(c);
        em_pipeline_run_params rp = em_pipeline_default_params();
        rp.prompt = r->prompt;
        if (r->prompts[0]) {
            rp.prompts = r->prompts;
            rp.num_prompts = 2;
        }
        rp.guidance_scale = r->guidance;
        rp.steps = r->steps;
        rp.num_images_per_prompt = r->per;
        rp.strength = r->strength;
        rp.seeds = r->seeds;
        rp.num_seeds = r->nseeds;
        snprintf(name, sizeof name, "%s_init", r->name);
        if (r->image) rp.image = em_test_bundle_get(b, c, name);
        snprintf(name, sizeof name, "%s_mask", r->name);
        if (r->mask) rp.mask_image = em_test_bundle_get(b, c, name);
        sd_test_image(c, p, b, &rp, "generator list ", r->name, "cpu");
        /* a list of the batch's length only */
        rp.num_seeds = r->nseeds - 1;
        CHECK(em_pipeline_run(c, p, &rp) == NULL);
        CHECK_ERR(c, EM_ERR_INVALID_ARG, "seeds (a generator per image) for a batch of");
        em_scope_pop(c);
        em_pipeline_free(p);
    }
    em_ctx_free(c);
    em_test_bundle_free(b);
}

/* Row i of a list's draw is generator i's draw of one row; fills split evenly. */
static void test_generator_list_draws(void) {
    em_ctx *c = em_ctx_create();
    const uint64_t seeds[3] = {4, 9, 4};
    em_torch_generator *l = em_torch_generator_create_list(seeds, 3);
    CHECK(l && em_torch_generator_count(l) == 3);
    CHECK(em_torch_generator_create_list(seeds, 0) == NULL);
    em_scope_push(c);
    em_tensor *t = em_torch_randn(c, l, 3, (int64_t[]){3, 5, 7}, NULL);
    CHECK_MSG(t != NULL, "%s", msg(c));
    float got[105], want[35];
    if (t) {
        CHECK(em_to_host_f32(c, t, got, 105) == EM_OK);
        for (int i = 0; i < 3; i++) {
            em_torch_generator *g = em_torch_generator_create(seeds[i]);
            em_torch_randn_fill(g, want, 35);
            CHECK(!memcmp(got + 35 * i, want, sizeof want));
            em_torch_generator_free(g);
        }
    }
    CHECK(em_torch_randn(c, l, 2, (int64_t[]){4, 2}, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_SHAPE, "a draw of 4 rows from a list of 3 generators");
    CHECK(em_torch_randn_fill(l, got, 10) == EM_ERR_INVALID_ARG);
    em_scope_pop(c);
    em_torch_generator_free(l);
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_generator_list_matches_diffusers), T(test_generator_list_draws))
