/*
 * The compiled training step (em_train_options.compile): the 10 AdamW steps of torch's fixture
 * (tests/fixtures/train/<family>_run, scripts/gen_train_run_fixtures.py: cosine with warmup,
 * clipping at 0.45) run with the step traced once and replayed, against torch's losses and grad
 * norms (1e-5, as test_train_run holds the eager trainer) and against the eager trainer's own
 * numbers and final weights (f32 rounding); one program compiled for all 10 steps; 5 compiled
 * steps, a save, a reload and 5 resumed compiled steps equal 10 compiled steps bit for bit. On
 * the CPU (a plan) and on XLA's CPU plugin (one PJRT program; skipped without the plugin).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ember/ember.h"
#include "harness.h"

#define STEPS 10

static const char *err(em_ctx *c) { return em_ctx_error(c) ? em_ctx_error(c)->message : ""; }

/* the run's hyper-parameters, as the bundle's metadata records them (torch's cosine schedule) */
static em_train_options fixture_options(em_test_bundle *b, bool compile, bool shuffle) {
    em_train_options o = em_train_default_options();
    o.seq_len = em_test_bundle_meta_int(b, "seq_len", 0);
    o.batch = em_test_bundle_meta_int(b, "batch", 0);
    o.steps = em_test_bundle_meta_int(b, "steps", 0);
    o.warmup = em_test_bundle_meta_int(b, "warmup", 0);
    o.lr = em_test_bundle_meta_num(b, "lr", NAN);
    o.weight_decay = em_test_bundle_meta_num(b, "weight_decay", NAN);
    o.beta1 = em_test_bundle_meta_num(b, "beta1", NAN);
    o.beta2 = em_test_bundle_meta_num(b, "beta2", NAN);
    o.eps = em_test_bundle_meta_num(b, "eps", NAN);
    o.grad_clip = em_test_bundle_meta_num(b, "grad_clip", NAN);
    o.schedule = EM_LR_COSINE;
    o.shuffle = shuffle;
    o.seed = 5;
    o.compile = compile;
    return o;
}

static em_model *load_as(em_ctx *c, const char *dir, const char *device, em_dtype dt) {
    em_model_options mo = em_model_default_options();
    mo.progress = false;
    mo.dtype = dt;
    mo.device = device;
    return em_model_load(c, dir, &mo);
}

static em_model *load(em_ctx *c, const char *dir, const char *device) {
    return load_as(c, dir, device, EM_F32);
}

typedef struct run {
    double loss[STEPS], norm[STEPS];
    int done;
} run;

/* steps [from, to) of trainer t into r; saves into save_dir after step save_at (-1: never) */
static void train(em_ctx *c, em_trainer *t, int from, int to, run *r, const char *save_dir,
                  int save_at) {
    for (int s = from; t && s < to; s++) {
        em_train_step_info info;
        if (em_trainer_step(c, t, &info) != EM_OK) {
            CHECK_MSG(false, "step %d: %s", s, err(c));
            return;
        }
        r->loss[s] = info.loss;
        r->norm[s] = info.grad_norm;
        r->done = s + 1;
        if (s == save_at) CHECK_MSG(em_trainer_save(c, t, save_dir) == EM_OK, "%s", err(c));
    }
}

static void rm_checkpoint(const char *dir) {
    const char *files[] = {"model.safetensors", "config.json", "generation_config.json",
                           "trainer_state.safetensors"};
    for (int i = 0; i < 4; i++) {
        char p[256];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        remove(p);
    }
    rmdir(dir);
}

/* every weight of the compiled run's model (mc) against the eager run's (me), of dtype dt, within
 * atol + rtol * |eager|. `outlier` > 0 allows a few elements (one in a thousand, at least one)
 * to differ by up to `outlier`: in bf16 an element whose gradient is near zero gets an AdamW
 * update whose sign follows the rounding of m / sqrt(v), so one differently fused product can
 * move it by a learning-rate step the other way (seen on XLA's CPU plugin on a CPU without AMX:
 * 1 element of 16384, by one step of lr 0.005). */
static void compare_weights(em_ctx *c, em_model *me, em_model *mc, const char *label, em_dtype dt,
                            double atol, double rtol, double outlier) {
    int np = mc ? em_model_params(c, mc, NULL, 0) : 0;
    em_model_param *pe = calloc((size_t)np + 1, sizeof *pe), *pc = calloc((size_t)np + 1, sizeof *pc);
    if (np > 0 && pe && pc && em_model_params(c, me, pe, np) == np &&
        em_model_params(c, mc, pc, np) == np)
        for (int i = 0; i < np; i++) {
            char what[192];
            snprintf(what, sizeof what, "%s: %s compiled vs eager", label, pc[i].name);
            CHECK_MSG(em_tensor_dtype(pc[i].tensor) == dt, "%s", what);
            if (outlier <= 0) {
                em_test_allclose(c, pc[i].tensor, pe[i].tensor, atol, rtol, what);
                continue;
            }
            int64_t n = em_tensor_numel(pc[i].tensor), out = 0, worst_i = -1;
            float *a = malloc((size_t)(n ? n : 1) * sizeof *a);
            float *e = malloc((size_t)(n ? n : 1) * sizeof *e);
            CHECK(a && e && em_to_host_f32(c, pc[i].tensor, a, n) == EM_OK &&
                  em_to_host_f32(c, pe[i].tensor, e, n) == EM_OK);
            double worst = 0;
            for (int64_t k = 0; a && e && k < n; k++) {
                double d = fabs((double)a[k] - (double)e[k]);
                if (!(d <= atol + rtol * fabs((double)e[k]))) out++;
                if (!(d <= worst)) worst = d, worst_i = k;
            }
            int64_t allowed = n / 1000 > 1 ? n / 1000 : 1;
            CHECK_MSG(out <= allowed && worst <= outlier,
                      "%s: %lld of %lld elements beyond %g + %g|x| (at most %lld may be, by up to "
                      "%g); the largest difference %g at element %lld", what, (long long)out,
                      (long long)n, atol, rtol, (long long)allowed, outlier, worst,
                      (long long)worst_i);
            free(a);
            free(e);
        }
    free(pe);
    free(pc);
}

/* torch: compare with torch's run of the family (its <family>_run bundle); else (MoE: no run
 * fixture) with the eager trainer alone, on the qwen3 bundle's hyper-parameters and windows */
static void check_family(const char *family, const char *device, bool torch) {
    char rel[128];
    snprintf(rel, sizeof rel, "train/%s_run", torch ? family : "qwen3");
    em_test_bundle *b = em_test_bundle_load(rel);
    if (!b) return;
    em_ctx *c = em_ctx_create();
    const char *mdir = em_test_fixture_path("models", family);
    em_train_data *d = em_train_data_load(c, em_test_fixture_path("train", "ids.npy"), NULL, 256);
    CHECK_MSG(d != NULL, "%s", err(c));
    em_model *me = d ? load(c, mdir, device) : NULL, *mc = me ? load(c, mdir, device) : NULL;
    CHECK_MSG(mc != NULL, "%s", err(c));
    em_train_options oe = fixture_options(b, false, false), oc = fixture_options(b, true, false);
    em_trainer *te = mc ? em_trainer_create(c, me, d, &oe) : NULL;
    em_trainer *tc = te ? em_trainer_create(c, mc, d, &oc) : NULL;
    CHECK_MSG(tc != NULL, "%s", err(c));
    run eager = {0}, comp = {0};
    train(c, te, 0, STEPS, &eager, NULL, -1);
    train(c, tc, 0, STEPS, &comp, NULL, -1);
    em_tensor *want_loss = em_test_bundle_get(b, c, "loss");
    em_tensor *want_norm = em_test_bundle_get(b, c, "grad_norm");
    double worst_loss = 0, worst_norm = 0;
    for (int s = 0; s < comp.done && s < eager.done; s++) {
        double wl = em_test_at(c, want_loss, s), wn = em_test_at(c, want_norm, s);
        CHECK_MSG(!torch || fabs(comp.loss[s] - wl) <= 1e-5,
                  "%s %s step %d: compiled loss %.9g, torch %.9g", family, device, s,
                  comp.loss[s], wl);
        CHECK_MSG(!torch || fabs(comp.norm[s] - wn) <= 1e-5 * wn,
                  "%s %s step %d: compiled grad norm %.9g, torch %.9g", family, device, s,
                  comp.norm[s], wn);
        /* against the eager trainer: f32 rounding (the same ops; a plan may fuse and order
         * reductions differently) */
        double dl = fabs(comp.loss[s] - eager.loss[s]), dn = fabs(comp.norm[s] - eager.norm[s]);
        worst_loss = dl > worst_loss ? dl : worst_loss;
        worst_norm = dn / eager.norm[s] > worst_norm ? dn / eager.norm[s] : worst_norm;
        CHECK_MSG(dl <= 2e-6 && dn <= 2e-6 * eager.norm[s],
                  "%s %s step %d: compiled loss %.9g norm %.9g, eager %.9g %.9g", family, device,
                  s, comp.loss[s], comp.norm[s], eager.loss[s], eager.norm[s]);
    }
    CHECK_MSG(comp.done == STEPS, "%s %s: %d compiled steps", family, device, comp.done);
    printf("  %s on %s: compiled vs eager: loss within %.3g, grad norm within %.3g relative\n",
           family, device, worst_loss, worst_norm);
    em_compile_stats st;
    em_trainer_compile_stats(tc, &st);
    CHECK_MSG(st.compiles == 1 && st.programs == 1 && st.calls == STEPS,
              "%s %s: %lld compiles, %lld programs, %lld calls for %d steps", family, device,
              (long long)st.compiles, (long long)st.programs, (long long)st.calls, STEPS);
    printf("  %s on %s: one %s program of %d ops (%d traced) for %lld steps, %.0f ms to compile\n",
           family, device, st.backend, st.nodes, st.nodes_traced, (long long)st.calls,
           st.compile_ms);
    em_compile_stats none;
    em_trainer_compile_stats(te, &none);
    CHECK(none.compiles == 0);
    /* the trained weights: the compiled run's against the eager run's */
    char label[96];
    snprintf(label, sizeof label, "%s %s", family, device);
    compare_weights(c, me, mc, label, EM_F32, 1e-5, 1e-4, 0);
    em_trainer_free(tc);
    em_trainer_free(te);
    em_model_free(mc);
    em_model_free(me);
    em_train_data_free(d);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

/* 5 compiled steps, a save, a reload and 5 resumed compiled steps equal 10 compiled steps, bit
 * for bit (shuffled, so the data position is restored too). */
static void check_resume(const char *device) {
    em_test_bundle *b = em_test_bundle_load("train/qwen3_run");
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_train_data *d = em_train_data_load(c, em_test_fixture_path("train", "ids.npy"), NULL, 256);
    em_model *m = d ? load(c, em_test_fixture_path("models", "qwen3"), device) : NULL, *m2 = NULL;
    em_train_options o = fixture_options(b, true, true);
    em_trainer *t = m ? em_trainer_create(c, m, d, &o) : NULL, *t2 = NULL;
    CHECK_MSG(t != NULL, "%s", err(c));
    char dir[] = "/tmp/ember_train_compile_XXXXXX";
    bool have_dir = mkdtemp(dir) != NULL;
    CHECK(have_dir);
    run whole = {0}, resumed = {0};
    train(c, t, 0, STEPS, &whole, dir, have_dir ? 4 : -1);
    m2 = have_dir && whole.done == STEPS ? load(c, dir, device) : NULL;
    t2 = m2 ? em_trainer_create(c, m2, d, &o) : NULL;
    CHECK_MSG(t2 && em_trainer_resume(c, t2, dir) == EM_OK && em_trainer_steps_done(t2) == 5, "%s",
              err(c));
    if (t2 && em_trainer_steps_done(t2) == 5) train(c, t2, 5, STEPS, &resumed, NULL, -1);
    CHECK_MSG(resumed.done == STEPS, "%s: resumed run stopped at %d", device, resumed.done);
    for (int s = 5; s < resumed.done; s++)
        CHECK_MSG(resumed.loss[s] == whole.loss[s] && resumed.norm[s] == whole.norm[s],
                  "%s step %d: resumed loss %.17g norm %.17g, uninterrupted %.17g %.17g", device,
                  s, resumed.loss[s], resumed.norm[s], whole.loss[s], whole.norm[s]);
    if (have_dir) rm_checkpoint(dir);
    em_trainer_free(t2);
    em_trainer_free(t);
    em_model_free(m2);
    em_model_free(m);
    em_train_data_free(d);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

/* bf16 weights with f32 masters: the compiled step (masters, moments and the rounding into the
 * model's weights inside the program) against the eager trainer's mixed-precision step — the
 * same ops, so the losses and norms agree to bf16 rounding of differently fused products, and
 * the final bf16 weights to a bf16 ulp or two; one program for all steps. With ckpt, both with
 * gradient checkpointing (the compiled step traces each layer's recomputation in its backward). */
static void check_bf16(const char *device, bool ckpt) {
    em_test_bundle *b = em_test_bundle_load("train/qwen3_run");
    if (!b) return;
    em_ctx *c = em_ctx_create();
    em_train_data *d = em_train_data_load(c, em_test_fixture_path("train", "ids.npy"), NULL, 256);
    const char *mdir = em_test_fixture_path("models", "qwen3");
    em_model *me = d ? load_as(c, mdir, device, EM_BF16) : NULL;
    em_model *mc = me ? load_as(c, mdir, device, EM_BF16) : NULL;
    em_train_options oe = fixture_options(b, false, false), oc = fixture_options(b, true, false);
    oe.gradient_checkpointing = oc.gradient_checkpointing = ckpt;
    em_trainer *te = mc ? em_trainer_create(c, me, d, &oe) : NULL;
    em_trainer *tc = te ? em_trainer_create(c, mc, d, &oc) : NULL;
    CHECK_MSG(tc != NULL, "%s", err(c));
    run eager = {0}, comp = {0};
    train(c, te, 0, STEPS, &eager, NULL, -1);
    train(c, tc, 0, STEPS, &comp, NULL, -1);
    CHECK_MSG(comp.done == STEPS && eager.done == STEPS, "bf16 %s: %d compiled, %d eager steps",
              device, comp.done, eager.done);
    double worst = 0;
    for (int s = 0; s < comp.done && s < eager.done; s++) {
        double dl = fabs(comp.loss[s] - eager.loss[s]) / eager.loss[s];
        double dn = fabs(comp.norm[s] - eager.norm[s]) / eager.norm[s];
        worst = dl > worst ? dl : dn > worst ? dn : worst;
        CHECK_MSG(dl <= 2e-4 && dn <= 2e-3, "bf16 %s step %d: compiled loss %.9g norm %.9g, "
                  "eager %.9g %.9g", device, s, comp.loss[s], comp.norm[s], eager.loss[s],
                  eager.norm[s]);
    }
    em_compile_stats st;
    em_trainer_compile_stats(tc, &st);
    printf("  qwen3 bf16%s on %s: compiled vs eager within %.3g relative; %d ops traced\n",
           ckpt ? " checkpointed" : "", device, worst, st.nodes_traced);
    CHECK_MSG(st.compiles == 1 && st.calls == STEPS, "bf16 %s: %lld compiles, %lld calls", device,
              (long long)st.compiles, (long long)st.calls);
    char label[96];
    snprintf(label, sizeof label, "bf16 %s", device);
    /* outliers: two learning-rate steps at most (oe.lr is the fixture's peak rate) */
    compare_weights(c, me, mc, label, EM_BF16, 2e-3, 2e-2, 2 * oe.lr);
    em_trainer_free(tc);
    em_trainer_free(te);
    em_model_free(mc);
    em_model_free(me);
    em_train_data_free(d);
    em_ctx_free(c);
    em_test_bundle_free(b);
}

/* the router's load-balancing loss compiled; a step that cannot be traced fails naming why */
static void test_refused(void) {
    em_ctx *c = em_ctx_create();
    em_train_data *d = em_train_data_load(c, em_test_fixture_path("train", "ids.npy"), NULL, 256);
    em_model *m = d ? load(c, em_test_fixture_path("models", "qwen3"), NULL) : NULL;
    em_train_options o = em_train_default_options();
    o.seq_len = 16;
    o.steps = 1;
    o.compile = true;
    /* the router's load-balancing loss (qwen3_moe with output_router_logits on) is traced too:
     * the expert counts are ops on the device; compiled and eager steps give the same losses */
    const char *dir = em_test_scratch_make("train_aux");
    em_model *aux = NULL, *aux_e = NULL;
    if (dir) {
        em_test_scratch_link("model.safetensors", "models", "qwen3_moe/model.safetensors");
        FILE *f = fopen(em_test_fixture_path("models", "qwen3_moe/config.json"), "rb");
        char cfg[8192];
        size_t n = f ? fread(cfg, 1, sizeof cfg - 1, f) : 0;
        if (f) fclose(f);
        cfg[n] = 0;
        char *at = strstr(cfg, "\"output_router_logits\": false");
        CHECK(at != NULL);
        if (at) {
            memcpy(at + strlen("\"output_router_logits\": "), "true ", 5);
            em_test_scratch_write("config.json", cfg);
            aux = load(c, dir, NULL);
            aux_e = load(c, dir, NULL);
        }
    }
    em_train_options oe = o;
    oe.compile = false;
    oe.steps = o.steps = 3;
    em_trainer *ta = aux ? em_trainer_create(c, aux, d, &o) : NULL;
    em_trainer *te = aux_e ? em_trainer_create(c, aux_e, d, &oe) : NULL;
    CHECK_MSG(ta && te, "router loss: %s", err(c));
    for (int s = 0; ta && te && s < 3; s++) {
        em_train_step_info ic, ie;
        CHECK_MSG(em_trainer_step(c, ta, &ic) == EM_OK && em_trainer_step(c, te, &ie) == EM_OK,
                  "router loss step %d: %s", s, err(c));
        CHECK_MSG(fabs(ic.loss - ie.loss) <= 2e-6 && fabs(ic.grad_norm - ie.grad_norm) <= 2e-6 * ie.grad_norm,
                  "router loss step %d: compiled %.9g / %.9g, eager %.9g / %.9g", s, ic.loss,
                  ic.grad_norm, ie.loss, ie.grad_norm);
    }
    em_ctx_clear_error(c);
    em_trainer_free(ta);
    em_trainer_free(te);
    em_model_free(aux);
    em_model_free(aux_e);
    em_test_scratch_remove();
    o.steps = 1;
    /* a step that cannot be traced (MoE with the loop experts, which route on the host) fails
     * at its first call naming why, leaving no traced value on the tape or the parameters */
    em_model_options mo = em_model_default_options();
    mo.progress = false;
    mo.dtype = EM_F32;
    mo.moe_impl = EM_MOE_LOOP;
    em_model *moe = em_model_load(c, em_test_fixture_path("models", "qwen3_moe"), &mo);
    em_trainer *t = moe ? em_trainer_create(c, moe, d, &o) : NULL;
    CHECK_MSG(t != NULL, "%s", err(c));
    em_train_step_info info;
    CHECK(t && em_trainer_step(c, t, &info) == EM_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err(c), "loop implementation needs the routing on the host"), "%s", err(c));
    CHECK(em_grad_tape_size(c) == 0 && em_trainer_steps_done(t) == 0);
    int np = moe ? em_model_params(c, moe, NULL, 0) : 0;
    em_model_param *ps = calloc((size_t)np + 1, sizeof *ps);
    if (ps && np > 0 && em_model_params(c, moe, ps, np) == np)
        for (int i = 0; i < np; i++) CHECK(em_tensor_grad(ps[i].tensor) == NULL);
    free(ps);
    em_ctx_clear_error(c);
    em_trainer_free(t);
    em_model_free(moe);
    em_model_free(m);
    em_train_data_free(d);
    em_ctx_free(c);
}

static bool have_xla(void) {
    em_ctx *c = em_ctx_create();
    bool ok = em_device_get(c, "xla:0") != NULL;
    if (!ok)
        em_test_skip("no XLA CPU PJRT plugin (set EMBER_PJRT_XLA_PLUGIN=/path/xla_cpu_pjrt.so): "
                     "%s", err(c));
    em_ctx_free(c);
    return ok;
}

static void test_qwen3_cpu(void) { check_family("qwen3", "cpu", true); }
static void test_llama_tied_cpu(void) { check_family("llama", "cpu", true); }
/* MoE (ragged experts): the routing stays on the device while traced, the experts' gradient
 * is the device form of ragged_dot's rule */
static void test_qwen3_moe_cpu(void) { check_family("qwen3_moe", "cpu", false); }
static void test_mixtral_cpu(void) { check_family("mixtral", "cpu", false); }
static void test_resume_cpu(void) { check_resume("cpu"); }
static void test_bf16_cpu(void) { check_bf16("cpu", false); }
static void test_bf16_ckpt_cpu(void) { check_bf16("cpu", true); }
static void test_bf16_xla(void) {
    if (have_xla()) check_bf16("xla:0", false);
}
static void test_bf16_ckpt_xla(void) {
    if (have_xla()) check_bf16("xla:0", true);
}
static void test_qwen3_xla(void) {
    if (have_xla()) check_family("qwen3", "xla:0", true);
}
static void test_llama_tied_xla(void) {
    if (have_xla()) check_family("llama", "xla:0", true);
}
static void test_qwen3_moe_xla(void) {
    if (have_xla()) check_family("qwen3_moe", "xla:0", false);
}
static void test_resume_xla(void) {
    if (have_xla()) check_resume("xla:0");
}

EM_TEST_MAIN(T(test_qwen3_cpu), T(test_llama_tied_cpu), T(test_qwen3_moe_cpu), T(test_mixtral_cpu),
             T(test_resume_cpu), T(test_bf16_cpu), T(test_bf16_ckpt_cpu), T(test_refused), T(test_bf16_xla), T(test_bf16_ckpt_xla), T(test_qwen3_xla), T(test_llama_tied_xla),
             T(test_qwen3_moe_xla), T(test_resume_xla))
