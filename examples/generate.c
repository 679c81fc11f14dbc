/* Load a Hugging Face model (Hub id or folder) and stream a chat reply: the C face of
 * `AutoModelForCausalLM.from_pretrained(...).generate(...)`.
 *
 *   ./generate Qwen/Qwen3-0.6B "Why is the sky blue?"
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ember/ember.h>

static bool print_piece(void *user, int seq, em_token id, const char *piece) {
    (void)user, (void)seq, (void)id;
    fputs(piece, stdout);
    fflush(stdout);
    return true; /* false would stop this sequence */
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL_ID_OR_DIR \"message\"\n", argv[0]);
        return 2;
    }
    em_ctx *c = em_ctx_create();
    em_model_options o = em_model_default_options();
    o.dtype = EM_BF16;
    em_model *m = em_model_load(c, argv[1], &o);
    em_tokenizer *tok = m ? em_tokenizer_load(c, em_model_dir(m)) : NULL;
    if (!tok) {
        fprintf(stderr, "%s\n", em_ctx_error(c)->message);
        return 1;
    }
    /* the conversation, rendered with the model's chat template by em_generate_chat */
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", argv[2]);
    char *mj = json_dumps(msgs, JSON_COMPACT);
    em_generate_params p = em_generate_default_params(m); /* generation_config.json's */
    p.max_new_tokens = 128;
    p.on_token = print_piece;
    em_generate_result r;
    const char *convs[1] = {mj};
    if (em_generate_chat(c, m, tok, convs, 1, NULL, &p, &r) == EM_OK) {
        printf("\n[%lld tokens, %.1f tokens/s, stopped by %s]\n", (long long)r.n_ids[0],
               r.decode_s > 0 ? (double)r.decoded_tokens / r.decode_s : 0.0,
               em_stop_reason_name(r.stop_reason[0]));
        em_generate_result_free(&r);
    } else {
        fprintf(stderr, "%s\n", em_ctx_error(c)->message);
    }
    free(mj);
    json_decref(msgs);
    em_tokenizer_free(tok);
    em_model_free(m);
    em_ctx_free(c);
    return 0;
}
