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

static bool print_piece(void *user, int seq, int64_t id, const char *piece) {
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
    /* the conversation, rendered with the model's chat template */
    json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", argv[2]);
    char *mj = json_dumps(msgs, JSON_COMPACT);
    char *prompt = tok ? em_apply_chat_template(c, tok, mj, true, NULL) : NULL;
    int32_t *ids32 = NULL;
    size_t n = 0;
    if (prompt) em_tokenizer_encode(c, tok, prompt, strlen(prompt), false, &ids32, &n);
    if (em_ctx_status(c)) {
        fprintf(stderr, "%s\n", em_ctx_error(c)->message);
        return 1;
    }
    int64_t *ids = malloc(n * sizeof *ids), len = (int64_t)n;
    for (size_t i = 0; i < n; i++) ids[i] = ids32[i];
    em_generate_params p = em_generate_default_params(m); /* generation_config.json's */
    p.max_new_tokens = 128;
    p.on_token = print_piece;
    em_generate_result r;
    const int64_t *prompts[1] = {ids};
    if (em_generate(c, m, tok, prompts, &len, 1, &p, &r) == EM_OK) {
        printf("\n[%lld tokens, %.1f tokens/s, stopped by %s]\n", (long long)r.n_ids[0],
               r.decode_s > 0 ? (double)r.decoded_tokens / r.decode_s : 0.0, r.stop_reason[0]);
        em_generate_result_free(&r);
    } else {
        fprintf(stderr, "%s\n", em_ctx_error(c)->message);
    }
    free(ids);
    em_free(ids32);
    em_free(prompt);
    free(mj);
    json_decref(msgs);
    em_tokenizer_free(tok);
    em_model_free(m);
    em_ctx_free(c);
    return 0;
}
