/* libFuzzer target: arbitrary bytes as a UNet2DModel config.json. Either they are rejected with
 * a message, or the struct is consistent (as many block types as block sizes, positive sizes
 * that the norm groups divide, a known time and class embedding). */
#include <stdlib.h>

#include "ember/diffusion.h"
#include "ember/ember.h"
#include "fuzz_util.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    em_ctx *c = em_ctx_create();
    if (!c) return 0;
    em_unet2d_config cfg;
    if (em_unet2d_config_parse(c, (const char *)data, size, "fuzz.json", &cfg) == EM_OK) {
        INVARIANT(cfg.n_blocks >= 1 && cfg.n_blocks <= EM_UNET2D_MAX_BLOCKS);
        INVARIANT(cfg.norm_num_groups > 0 && cfg.layers_per_block > 0 && cfg.time_embed_dim > 0);
        for (int i = 0; i < cfg.n_blocks; i++) {
            INVARIANT(cfg.block_out_channels[i] > 0);
            INVARIANT(cfg.block_out_channels[i] % cfg.norm_num_groups == 0);
            INVARIANT(cfg.down_blocks[i] <= EM_UNET2D_BLOCK_CROSS_ATTN);
            INVARIANT(cfg.up_blocks[i] <= EM_UNET2D_BLOCK_CROSS_ATTN);
            /* a cross-attention block needs the encoder states' width and its heads */
            INVARIANT((cfg.down_blocks[i] != EM_UNET2D_BLOCK_CROSS_ATTN &&
                       cfg.up_blocks[i] != EM_UNET2D_BLOCK_CROSS_ATTN) ||
                      (cfg.cross_attention_dim > 0 && cfg.attn_heads[i] > 0 &&
                       cfg.transformer_layers[i] > 0));
        }
        INVARIANT(cfg.time_embedding <= EM_UNET2D_TIME_LEARNED);
        INVARIANT(cfg.time_embedding != EM_UNET2D_TIME_LEARNED || cfg.num_train_timesteps > 0);
        INVARIANT(cfg.class_embedding <= EM_UNET2D_CLASS_IDENTITY);
        INVARIANT(cfg.norm_eps > 0 && cfg.in_channels > 0 && cfg.out_channels > 0);
    } else {
        INVARIANT(em_ctx_error(c) && em_ctx_error(c)->message[0]);
        INVARIANT(cfg.n_blocks == 0);
        em_ctx_clear_error(c);
    }
    em_ctx_free(c);
    return 0;
}
