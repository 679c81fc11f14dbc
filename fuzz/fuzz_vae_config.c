/* libFuzzer target: arbitrary bytes as an AutoencoderKL config.json. Either they are rejected
 * with a message and a zeroed struct, or the struct is consistent (positive sizes, block sizes
 * the norm groups divide, a known activation). */
#include <string.h>

#include "ember/ember.h"
#include "ember/vae.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    em_ctx *c = em_ctx_create();
    if (!c) return 0;
    em_vae_config cfg;
    if (em_vae_config_parse(c, (const char *)data, size, "fuzz.json", &cfg) == EM_OK) {
        INVARIANT(cfg.n_blocks >= 1 && cfg.n_blocks <= EM_VAE_MAX_BLOCKS);
        INVARIANT(cfg.in_channels > 0 && cfg.out_channels > 0 && cfg.latent_channels > 0);
        INVARIANT(cfg.layers_per_block > 0 && cfg.norm_num_groups > 0);
        for (int i = 0; i < cfg.n_blocks; i++)
            INVARIANT(cfg.block_out_channels[i] > 0 &&
                      cfg.block_out_channels[i] % cfg.norm_num_groups == 0);
        INVARIANT(memchr(cfg.act_fn, 0, sizeof cfg.act_fn) != NULL);
    } else {
        INVARIANT(em_ctx_error(c) && em_ctx_error(c)->message[0]);
        INVARIANT(cfg.n_blocks == 0);
        em_ctx_clear_error(c);
    }
    em_ctx_free(c);
    return 0;
}
