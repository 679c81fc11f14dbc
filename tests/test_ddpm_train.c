/*
 * DDPM training of a UNet2DModel (ember/ddpm.h) against diffusers and torch
 * (scripts/gen_ddpm_train_fixtures.py): two steps of add_noise + MSE + backward + AdamW on the
 * tiny committed DDPMPipeline tests/fixtures/diffusion/ddpm_attn, the losses, a few parameters
 * and how far every parameter moved. Then what has no reference beyond shapes: fresh models
 * (em_unet2d_create) saved as a DDPMPipeline folder and loaded back, the digits CSV reader and
 * its errors, and a few training steps on a small synthetic CSV.gz written here, saved and
 * sampled with em_pipeline_load / em_pipeline_run.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef EMBER_HAVE_ZLIB
#include <zlib.h>
#endif

#include "ember/ember.h"
#include "harness.h"

static const char *msg(em_ctx *c) { return em_ctx_error(c) ? em_ctx_error(c)->message : ""; }

static em_adamw_options fixture_adamw(void) {
    em_adamw_options o = em_adamw_default_options();
    o.lr = 1e-3;
    o.weight_decay = 1e-2;
    return o;
}

static void test_ddpm_train_matches_diffusers(void) {
    em_test_bundle *b = em_test_bundle_load("diffusion/ddpm_train_ref");
    json_t *ref = em_test_load_json(em_test_fixture_path("diffusion", "ddpm_train_ref.json"));
    CHECK(b && ref);
    if (!b || !ref) {
        em_test_bundle_free(b);
        json_decref(ref);
        return;
    }
    em_ctx *c = em_ctx_create();
    em_unet2d *u = em_unet2d_load(c, em_test_fixture_path("diffusion", "ddpm_attn/unet"), NULL);
    em_unet2d *u0 = em_unet2d_load(c, em_test_fixture_path("diffusion", "ddpm_attn/unet"), NULL);
    em_scheduler *s = em_scheduler_from_file(c, em_test_fixture_path("diffusion",
                                                                      "ddpm_attn/scheduler"));
    em_adamw_options o = fixture_adamw();
    em_ddpm_trainer *t = em_ddpm_trainer_create(c, u, s, &o, 0);
    CHECK_MSG(t != NULL, "%s", msg(c));
    /* diffusers' EMAModel with train_unconditional.py's --use_ema settings (meta.ema) */
    json_t *meta = json_object_get(ref, "meta"), *eo = json_object_get(meta, "ema");
    em_ema_options ema_o = em_ema_default_options();
    ema_o.use_ema_warmup = true;
    ema_o.decay = json_number_value(json_object_get(eo, "max_decay"));
    ema_o.inv_gamma = json_number_value(json_object_get(eo, "inv_gamma"));
    ema_o.power = json_number_value(json_object_get(eo, "power"));
    int np = em_unet2d_param_count(u);
    em_tensor **ps = calloc((size_t)np, sizeof *ps);
    for (int k = 0; ps && k < np; k++) ps[k] = em_unet2d_param(u, k);
    em_ema *ema = ps ? em_ema_create(c, ps, np, &ema_o) : NULL;
    CHECK_MSG(ema != NULL, "%s", msg(c));
    em_scope_push(c);
    for (int k = 0; t && ema && k < 2; k++) {
        char key[64];
        em_tensor *in[3];
        const char *names[3] = {"x0", "noise", "t"};
        for (int i = 0; i < 3; i++) {
            snprintf(key, sizeof key, "step%d/%s", k, names[i]);
            in[i] = em_test_bundle_get(b, c, key);
        }
        double loss = NAN;
        CHECK_MSG(em_ddpm_train_step(c, t, in[0], in[1], in[2], &loss) == EM_OK, "%s", msg(c));
        CHECK_MSG(em_ema_step(c, ema) == EM_OK, "%s", msg(c));
        snprintf(key, sizeof key, "step%d/loss", k);
        double want = em_test_at(c, em_reshape(c, em_test_bundle_get(b, c, key), 1, (int64_t[]){1}), 0);
        CHECK_MSG(fabs(loss - want) <= 1e-5 * (1 + fabs(want)), "step %d loss %.8f, diffusers "
                  "%.8f", k, loss, want);
    }
    /* a few parameters after both steps, and their averages */
    size_t i;
    json_t *v;
    double want_decay = json_number_value(json_object_get(meta, "ema_decay"));
    CHECK_MSG(em_ema_steps(ema) == 2 && fabs(em_ema_decay(ema) - want_decay) <= 1e-12,
              "EMA decay %.17g after %lld steps, diffusers %.17g", em_ema_decay(ema),
              (long long)em_ema_steps(ema), want_decay);
    json_array_foreach(json_object_get(meta, "params"), i, v) {
        char key[256];
        snprintf(key, sizeof key, "after/%s", json_string_value(v));
        em_tensor *p = em_unet2d_find_param(u, json_string_value(v));
        CHECK_MSG(p != NULL, "no parameter %s", json_string_value(v));
        if (p) em_test_allclose(c, p, em_test_bundle_get(b, c, key), 1e-5, 1e-5, key);
        int at = -1;
        for (int k = 0; k < np; k++)
            if (ps[k] == p) at = k;
        snprintf(key, sizeof key, "ema/%s", json_string_value(v));
        if (at >= 0)
            em_test_allclose(c, em_ema_shadow(ema, at), em_test_bundle_get(b, c, key), 1e-5, 1e-5,
                             key);
    }
    /* how far every parameter moved, in diffusers' order and names */
    json_t *names = json_object_get(meta, "names");
    CHECK_MSG(json_array_size(names) == (size_t)em_unet2d_param_count(u),
              "diffusers has %zu parameters, Ember %d", json_array_size(names),
              em_unet2d_param_count(u));
    em_tensor *dn = em_test_bundle_get(b, c, "delta_norm");
    json_array_foreach(names, i, v) {
        const char *n = json_string_value(v);
        /* the key projection's bias shifts every score of a query by the same amount, which
         * softmax ignores: its gradient is rounding noise (~1e-10), which Adam's first steps
         * blow up to +-lr whichever sign the noise has, in torch as here */
        if (strstr(n, "to_k.bias")) continue;
        em_tensor *p = em_unet2d_find_param(u, n), *p0 = em_unet2d_find_param(u0, n);
        CHECK_MSG(p && p0, "no parameter %s", n);
        if (!p || !p0) continue;
        em_tensor *d = em_sub(c, p, p0);
        double got = NAN;
        em_item(c, em_sqrt(c, em_sum(c, em_mul(c, d, d), NULL, 0, false)), &got);
        double want = em_test_at(c, dn, (long long)i);
        CHECK_MSG(fabs(got - want) <= 1e-5 + 1e-3 * want, "%s moved %.8g, in torch %.8g", n, got,
                  want);
    }
    /* copy_to: the averages into the model */
    CHECK(ema && em_ema_copy_to(c, ema) == EM_OK);
    em_tensor *p0 = ema ? em_unet2d_param(u, 0) : NULL;
    if (p0) em_test_allclose(c, p0, em_ema_shadow(ema, 0), 0, 0, "copy_to");
    /* bad arguments */
    em_ema_options bad = em_ema_default_options();
    bad.min_decay = 0.5;
    bad.decay = 0.4;
    CHECK(em_ema_create(c, ps, np, &bad) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "min_decay <= decay");
    CHECK(em_ema_create(c, ps, 0, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "no parameters");
    em_scope_pop(c);
    em_ema_free(ema);
    free(ps);
    em_ddpm_trainer_free(t);
    em_scheduler_free(s);
    em_unet2d_free(u);
    em_unet2d_free(u0);
    em_ctx_free(c);
    json_decref(ref);
    em_test_bundle_free(b);
}

/* A 1-channel 8x8 UNet2DModel small enough to train in a test. */
static const char *TINY_CFG =
    "{\"_class_name\": \"UNet2DModel\", \"sample_size\": 8, \"in_channels\": 1, "
    "\"out_channels\": 1, \"block_out_channels\": [8, 16], \"layers_per_block\": 1, "
    "\"norm_num_groups\": 4, \"down_block_types\": [\"DownBlock2D\", \"AttnDownBlock2D\"], "
    "\"up_block_types\": [\"AttnUpBlock2D\", \"UpBlock2D\"], \"attention_head_dim\": 8}";
static const char *TINY_SCHED =
    "{\"_class_name\": \"DDPMScheduler\", \"num_train_timesteps\": 50}";

static void test_unet_create_and_save(void) {
    em_ctx *c = em_ctx_create();
    em_unet2d *u = em_unet2d_create(c, TINY_CFG, strlen(TINY_CFG), 3, NULL);
    CHECK_MSG(u != NULL, "%s", msg(c));
    if (!u) {
        em_ctx_free(c);
        return;
    }
    /* names as diffusers', the norms initialised to 1 / 0 */
    CHECK(em_unet2d_param_count(u) > 20);
    CHECK(!strcmp(em_unet2d_param_name(u, 0), "conv_in.weight"));
    CHECK(em_unet2d_param_name(u, em_unet2d_param_count(u)) == NULL);
    CHECK(em_unet2d_find_param(u, "mid_block.attentions.0.to_q.weight") != NULL);
    em_scope_push(c);
    em_tensor *w = em_unet2d_find_param(u, "conv_norm_out.weight");
    CHECK(w && em_test_at(c, w, 0) == 1.0 && em_test_at(c, w, 7) == 1.0);
    /* conv_in: U(-1/3, 1/3) (fan_in 9), not all equal */
    em_tensor *ci = em_reshape(c, em_unet2d_find_param(u, "conv_in.weight"), 1, (int64_t[]){72});
    double lo = 1, hi = -1;
    for (int i = 0; i < 72; i++) {
        double x = em_test_at(c, ci, i);
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
    }
    CHECK_MSG(lo >= -1.0 / 3 && hi <= 1.0 / 3 && hi - lo > 0.3, "conv_in in [%g, %g]", lo, hi);
    em_scope_pop(c);

    const char *dir = em_test_scratch_make("ddpm_save");
    char out[512];
    snprintf(out, sizeof out, "%s/pipe", dir ? dir : "/nonexistent");
    CHECK_MSG(em_ddpm_pipeline_save(c, u, TINY_SCHED, out) == EM_OK, "%s", msg(c));
    em_pipeline *p = em_pipeline_load(c, out, NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    if (p) {
        /* the weights written are the model's */
        em_unet2d *v = em_pipeline_unet(p);
        CHECK(em_unet2d_param_count(v) == em_unet2d_param_count(u));
        em_scope_push(c);
        for (int i = 0; i < em_unet2d_param_count(u); i++) {
            CHECK(!strcmp(em_unet2d_param_name(u, i), em_unet2d_param_name(v, i)));
            em_test_allclose(c, em_unet2d_param(v, i), em_unet2d_param(u, i), 0, 0,
                             em_unet2d_param_name(u, i));
        }
        em_scope_pop(c);
        CHECK(em_scheduler_num_train_timesteps(em_pipeline_scheduler(p)) == 50);
    }
    em_pipeline_free(p);
    /* a loaded model saves too (its folder's config.json written back), old and new alike */
    em_unet2d *l = em_unet2d_load(c, em_test_fixture_path("diffusion", "ddpm_attn/unet"), NULL);
    snprintf(out, sizeof out, "%s/unet", dir ? dir : "/nonexistent");
    CHECK_MSG(l && em_unet2d_save(c, l, out) == EM_OK, "%s", msg(c));
    em_unet2d *l2 = em_unet2d_load(c, out, NULL);
    CHECK_MSG(l2 != NULL, "%s", msg(c));
    if (l && l2) {
        CHECK(em_unet2d_param_count(l2) == em_unet2d_param_count(l));
        const em_unet2d_config *a = em_unet2d_get_config(l), *b = em_unet2d_get_config(l2);
        CHECK(a->n_blocks == b->n_blocks && a->block_out_channels[1] == b->block_out_channels[1] &&
              a->sample_size[0] == b->sample_size[0] && a->in_channels == b->in_channels &&
              a->attention_head_dim == b->attention_head_dim &&
              a->norm_num_groups == b->norm_num_groups && a->down_blocks[1] == b->down_blocks[1]);
        em_scope_push(c);
        for (int i = 0; i < em_unet2d_param_count(l); i++)
            em_test_allclose(c, em_unet2d_find_param(l2, em_unet2d_param_name(l, i)),
                             em_unet2d_param(l, i), 0, 0, em_unet2d_param_name(l, i));
        em_scope_pop(c);
    }
    em_unet2d_free(l);
    em_unet2d_free(l2);
    snprintf(out, sizeof out, "%s/pipe", dir ? dir : "/nonexistent");
    /* errors */
    CHECK(em_unet2d_create(c, "{", 1, 0, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_FORMAT, "em_unet2d_create");
    em_ctx_clear_error(c);
    const char *cond = "{\"_class_name\": \"UNet2DConditionModel\"}";
    CHECK(em_unet2d_create(c, cond, strlen(cond), 0, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_UNSUPPORTED, "UNet2DConditionModel");
    em_ctx_clear_error(c);
    CHECK(em_unet2d_create(c, NULL, 0, 0, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_INVALID_ARG, "NULL");
    em_ctx_clear_error(c);
    CHECK(em_ddpm_pipeline_save(c, u, "[1]", out) == EM_ERR_FORMAT);
    CHECK_ERR(c, EM_ERR_FORMAT, "scheduler");
    em_ctx_clear_error(c);
    /* missing parents are made (as save_pretrained's makedirs); a file in the way is an error */
    CHECK(em_ddpm_pipeline_save(c, u, NULL, "/dev/null/pipe") == EM_ERR_IO);
    CHECK_ERR(c, EM_ERR_IO, "/dev/null/pipe");
    em_ctx_clear_error(c);
    em_test_scratch_remove();
    em_unet2d_free(u);
    em_ctx_free(c);
}

/* Writes `text` to <scratch>/<rel>, gzip-compressed when zlib is there. */
static void write_gz(const char *rel, const char *text) {
#ifdef EMBER_HAVE_ZLIB
    gzFile f = gzopen(em_test_scratch_path(rel), "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(gzputs(f, text) == (int)strlen(text));
    gzclose(f);
#else
    em_test_scratch_write(rel, text);
#endif
}

static void test_digits_csv(void) {
    em_ctx *c = em_ctx_create();
    CHECK(em_test_scratch_make("ddpm_csv") != NULL);
    em_scope_push(c);
    write_gz("ok.csv.gz", "0,8,16,4,7\n\n16,16,0,0,1\n");
    int64_t *labels = NULL;
    em_tensor *x = em_digits_csv_load(c, em_test_scratch_path("ok.csv.gz"), 2, &labels);
    CHECK_MSG(x != NULL, "%s", msg(c));
    if (x) {
        CHECK(em_tensor_ndim(x) == 4 && em_tensor_shape(x)[0] == 2 &&
              em_tensor_shape(x)[1] == 1 && em_tensor_shape(x)[2] == 2);
        em_tensor *f = em_reshape(c, x, 1, (int64_t[]){8});
        CHECK(em_test_at(c, f, 0) == -1.0 && em_test_at(c, f, 1) == 0.0 &&
              em_test_at(c, f, 2) == 1.0 && em_test_at(c, f, 3) == -0.5);
        CHECK(labels && labels[0] == 7 && labels[1] == 1);
    }
    free(labels);
    /* a plain (uncompressed) file reads the same way */
    em_test_scratch_write("plain.csv", "1,2,3,4,5\n");
    CHECK(em_digits_csv_load(c, em_test_scratch_path("plain.csv"), 2, NULL) != NULL);
    /* errors name the file and the line */
    CHECK(em_digits_csv_load(c, em_test_scratch_path("missing.csv.gz"), 2, NULL) == NULL);
    CHECK_ERR(c, EM_ERR_NOT_FOUND, "missing.csv.gz");
    em_ctx_clear_error(c);
    /* file, its text, what the error must say */
    static const struct {
        const char *file, *text, *say[3];
    } BAD[] = {
        {"short.csv.gz", "0,0,0,0,1\n1,2,3\n", {"short.csv.gz:2", "3 values", "5"}},
        {"long.csv.gz", "0,0,0,0,1,2\n", {"long.csv.gz:1", "more than 5", ""}},
        {"bad.csv.gz", "0,x,0,0,1\n", {"bad.csv.gz:1", "value 2 is not an integer", ""}},
        {"range.csv.gz", "0,17,0,0,1\n", {"range.csv.gz:1", "pixel 17", ""}},
        {"label.csv.gz", "0,1,0,0,10\n", {"label.csv.gz:1", "label 10", ""}},
        {"empty.csv.gz", "\n", {"empty.csv.gz", "no rows", ""}},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        write_gz(BAD[i].file, BAD[i].text);
        CHECK(em_digits_csv_load(c, em_test_scratch_path(BAD[i].file), 2, NULL) == NULL);
        CHECK_ERR(c, EM_ERR_FORMAT, BAD[i].say[0], BAD[i].say[1], BAD[i].say[2]);
        em_ctx_clear_error(c);
    }
    em_scope_pop(c);
    em_test_scratch_remove();
    em_ctx_free(c);
}

/* A few steps on a synthetic 8x8 CSV.gz, saved, loaded back as a pipeline and sampled. */
static void test_train_save_sample(void) {
    em_ctx *c = em_ctx_create();
    const char *dir = em_test_scratch_make("ddpm_run");
    CHECK(dir != NULL);
    /* 8x8 rows: the 2x2 pattern of tiny_csv blown up to 4x4 blocks */
    char *rows = malloc(8 * 200);
    size_t at = 0;
    for (int r = 0; rows && r < 8; r++) {
        int k = r % 4;
        for (int i = 0; i < 64; i++) {
            int blk = (i / 8) / 4 * 2 + (i % 8) / 4;
            at += (size_t)sprintf(rows + at, "%d,", blk == k ? 16 : 0);
        }
        at += (size_t)sprintf(rows + at, "%d\n", k);
    }
    write_gz("d.csv.gz", rows);
    free(rows);
    em_scope_push(c);
    em_tensor *x = em_digits_csv_load(c, em_test_scratch_path("d.csv.gz"), 8, NULL);
    em_unet2d *u = em_unet2d_create(c, TINY_CFG, strlen(TINY_CFG), 1, NULL);
    em_scheduler *s = em_scheduler_from_json(c, TINY_SCHED, "test");
    em_ddpm_trainer *t = em_ddpm_trainer_create(c, u, s, NULL, 5);
    CHECK_MSG(x && t, "%s", msg(c));
    for (int k = 0; t && k < 3; k++) {
        double loss = NAN;
        CHECK_MSG(em_ddpm_train_step(c, t, x, NULL, NULL, &loss) == EM_OK, "%s", msg(c));
        CHECK_MSG(isfinite(loss) && loss > 0, "step %d loss %g", k, loss);
    }
    /* the batch's errors */
    if (t) {
        em_tensor *bad_t = em_from_host(c, EM_F32, 1, (int64_t[]){8},
                                        (float[]){0, 1, 2, 3, 4, 5, 6, 50});
        CHECK(em_ddpm_train_step(c, t, x, NULL, bad_t, NULL) == EM_ERR_INDEX);
        CHECK_ERR(c, EM_ERR_INDEX, "timestep 50");
        em_ctx_clear_error(c);
        em_tensor *flat = em_reshape(c, x, 2, (int64_t[]){8, 64});
        CHECK(em_ddpm_train_step(c, t, flat, NULL, NULL, NULL) == EM_ERR_SHAPE);
        em_ctx_clear_error(c);
    }
    char out[512];
    snprintf(out, sizeof out, "%s/pipe", dir ? dir : "/nonexistent");
    CHECK_MSG(em_ddpm_pipeline_save(c, u, TINY_SCHED, out) == EM_OK, "%s", msg(c));
    em_ddpm_trainer_free(t);
    em_scheduler_free(s);
    em_unet2d_free(u);
    em_pipeline *p = em_pipeline_load(c, out, NULL);
    CHECK_MSG(p != NULL, "%s", msg(c));
    em_pipeline_run_params rp = em_pipeline_default_params();
    rp.steps = 5;
    rp.seed = 1;
    em_tensor *img = p ? em_pipeline_run(c, p, &rp) : NULL;
    CHECK_MSG(img != NULL, "%s", msg(c));
    if (img) {
        CHECK(em_tensor_ndim(img) == 4 && em_tensor_shape(img)[1] == 8 &&
              em_tensor_shape(img)[2] == 8 && em_tensor_shape(img)[3] == 1);
        float v[64];
        CHECK(em_to_host_f32(c, img, v, 64) == EM_OK);
        bool ok = true;
        for (int i = 0; i < 64; i++) ok = ok && v[i] >= 0 && v[i] <= 1;
        CHECK(ok);
    }
    em_pipeline_free(p);
    em_scope_pop(c);
    em_test_scratch_remove();
    em_ctx_free(c);
}

EM_TEST_MAIN(T(test_ddpm_train_matches_diffusers), T(test_unet_create_and_save),
             T(test_digits_csv), T(test_train_save_sample))
