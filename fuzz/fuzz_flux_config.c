/* libFuzzer target: arbitrary bytes as a FluxTransformer2DModel config.json. Either they are
 * rejected with a message and a zeroed struct, or the sizes the loader and the forward divide
 * and allocate by are positive, and the rotary axes are even and cover the head. */
#include <stdlib.h>

#include "ember/ember.h"
#include "ember/flux.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    em_ctx *c = em_ctx_create();
    if (!c) return 0;
    em_flux_config cfg;
    if (em_flux_config_parse(c, (const char *)data, size, "fuzz.json", &cfg) == EM_OK) {
        INVARIANT(cfg.num_attention_heads > 0 && cfg.attention_head_dim > 0);
        INVARIANT(cfg.in_channels > 0 && cfg.out_channels > 0 && cfg.patch_size > 0);
        INVARIANT(cfg.num_layers >= 0 && cfg.num_single_layers >= 0);
        INVARIANT(cfg.joint_attention_dim > 0 && cfg.pooled_projection_dim > 0);
        INVARIANT(cfg.n_axes >= 1 && cfg.n_axes <= EM_FLUX_MAX_AXES);
        int64_t sum = 0;
        for (int i = 0; i < cfg.n_axes; i++) {
            INVARIANT(cfg.axes_dims_rope[i] > 0 && cfg.axes_dims_rope[i] % 2 == 0);
            sum += cfg.axes_dims_rope[i];
        }
        INVARIANT(sum == cfg.attention_head_dim);
    } else {
        INVARIANT(em_ctx_error(c) && em_ctx_error(c)->message[0]);
        INVARIANT(cfg.in_channels == 0 && cfg.n_axes == 0);
        em_ctx_clear_error(c);
    }
    em_ctx_free(c);
    return 0;
}
