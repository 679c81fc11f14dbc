/* libFuzzer target: arbitrary bytes as a DiTTransformer2DModel config.json. Either they are
 * rejected with a message and a zeroed struct, or the sizes the loader and the forward divide
 * and allocate by are positive, the patches tile the latent, and the activation is known. */
#include <stdlib.h>

#include "ember/dit.h"
#include "ember/ember.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    em_ctx *c = em_ctx_create();
    if (!c) return 0;
    em_dit_config cfg;
    if (em_dit_config_parse(c, (const char *)data, size, "fuzz.json", &cfg) == EM_OK) {
        INVARIANT(cfg.num_attention_heads > 0 && cfg.attention_head_dim > 0);
        INVARIANT(cfg.in_channels > 0 && cfg.out_channels > 0 && cfg.num_layers > 0);
        INVARIANT(cfg.sample_size > 0 && cfg.patch_size > 0);
        INVARIANT(cfg.sample_size % cfg.patch_size == 0);
        INVARIANT(cfg.num_embeds_ada_norm > 0);
        INVARIANT(cfg.activation <= EM_DIT_ACT_GEGLU);
    } else {
        INVARIANT(em_ctx_error(c) && em_ctx_error(c)->message[0]);
        INVARIANT(cfg.num_layers == 0 && cfg.in_channels == 0);
        em_ctx_clear_error(c);
    }
    em_ctx_free(c);
    return 0;
}
