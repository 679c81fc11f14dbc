/* libFuzzer target: arbitrary bytes as a diffusers scheduler_config.json. Either they are
 * refused with a message, or the scheduler's schedule for a few step counts is consistent
 * (timesteps within the training range where the class indexes tables by them, one more sigma
 * than timesteps) and a step on a small sample either works or fails with a message. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "ember/scheduler.h"
#include "fuzz_util.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_text(data, size);
    if (!text) return 0;
    em_ctx *c = em_ctx_create();
    em_scheduler *s = em_scheduler_from_json(c, text, "fuzz.json");
    if (!s) {
        INVARIANT(em_ctx_error(c) && em_ctx_error(c)->message[0]);
    } else {
        int64_t N = em_scheduler_num_train_timesteps(s);
        int64_t steps[3] = {1, 3, N < 25 ? N : 25};
        for (int k = 0; k < 3; k++) {
            em_ctx_clear_error(c);
            if (em_scheduler_set_timesteps_mu(c, s, steps[k], 0.5) != EM_OK) {
                INVARIANT(em_ctx_error(c) && em_ctx_error(c)->message[0]);
                continue;
            }
            int64_t n = 0, ns = 0;
            const double *ts = em_scheduler_timesteps(s, &n);
            const float *sg = em_scheduler_sigmas(s, &ns);
            INVARIANT(ts && n >= 1);
            INVARIANT(!sg || ns == n + 1);
            em_scheduler_set_eta(s, 0.5);
            em_torch_generator *g = em_torch_generator_create(1);
            em_scope_push(c);
            em_tensor *x = em_ones(c, EM_F32, EM_SHAPE(1, 1, 2, 2));
            for (int64_t i = 0; i < n && i < 4 && x; i++) {
                em_tensor *in = em_scheduler_scale_model_input(c, s, x, ts[i]);
                x = in ? em_scheduler_step(c, s, in, ts[i], x, g) : NULL;
            }
            if (!x) INVARIANT(em_ctx_error(c) && em_ctx_error(c)->message[0]);
            em_scope_pop(c);
            em_torch_generator_free(g);
        }
        em_scheduler_free(s);
    }
    em_ctx_free(c);
    free(text);
    return 0;
}
