/* Log-probabilities of generated tokens, and their JSON in OpenAI's two shapes (chat and
 * completions). The model's raw distribution is reported, before penalties, temperature and
 * the truncations, as vLLM does by default. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ember/ember.h"
#include "serve/serve_impl.h"

float srv_logprob_top(const float *logits, int64_t vocab, int top, srv_logprob *out) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int64_t i = 0; i < vocab; i++) sum += exp((double)logits[i] - mx);
    float logz = mx + (float)log(sum);
    if (top > SRV_MAX_TOP_LOGPROBS) top = SRV_MAX_TOP_LOGPROBS;
    if (top > vocab) top = (int)vocab;
    out->n_top = 0;
    /* insertion into a sorted list of at most 20: one pass over the vocabulary */
    for (int64_t i = 0; i < vocab && top > 0; i++) {
        float v = logits[i];
        int n = out->n_top;
        if (n == top && v <= out->top_lp[n - 1]) continue;
        int k = n < top ? n : top - 1;
        while (k > 0 && out->top_lp[k - 1] < v) {
            out->top_lp[k] = out->top_lp[k - 1];
            out->top_id[k] = out->top_id[k - 1];
            k--;
        }
        out->top_lp[k] = v;
        out->top_id[k] = (int32_t)i;
        if (n < top) out->n_top++;
    }
    for (int k = 0; k < out->n_top; k++) out->top_lp[k] -= logz;
    return logz;
}

/* The token's text (U+FFFD for bytes that are not UTF-8 on their own) and its bytes. */
static json_t *token_text(em_ctx *c, em_server *s, int32_t id, json_t **bytes) {
    size_t len = 0;
    em_token t = id;
    char *text = em_tokenizer_decode(c, s->tok, &t, 1, false, &len);
    json_t *str = text ? json_stringn(text, len) : NULL;
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; text && i < len; i++)
            json_array_append_new(*bytes, json_integer((unsigned char)text[i]));
    }
    em_free(text);
    em_ctx_clear_error(c);
    return str ? str : json_string("");
}

json_t *srv_logprobs_json(em_server *s, const srv_job *j, int64_t from, int64_t to,
                          size_t *offset) {
    em_ctx *c = em_ctx_create();
    if (!c) return NULL;
    json_t *out;
    if (j->chat) {
        json_t *content = json_array();
        for (int64_t i = from; i < to; i++) {
            const srv_logprob *p = &j->lp[i];
            json_t *bytes, *tops = json_array();
            json_t *tok = token_text(c, s, p->id, &bytes);
            for (int k = 0; k < p->n_top; k++) {
                json_t *tb, *tt = token_text(c, s, p->top_id[k], &tb);
                json_array_append_new(tops, json_pack("{s:o, s:f, s:o}", "token", tt, "logprob",
                                                      (double)p->top_lp[k], "bytes", tb));
            }
            json_array_append_new(content, json_pack("{s:o, s:f, s:o, s:o}", "token", tok,
                                                     "logprob", (double)p->lp, "bytes", bytes,
                                                     "top_logprobs", tops));
        }
        out = json_pack("{s:o}", "content", content);
    } else {
        json_t *toks = json_array(), *lps = json_array(), *tops = json_array(),
               *offs = json_array();
        for (int64_t i = from; i < to; i++) {
            const srv_logprob *p = &j->lp[i];
            json_t *tok = token_text(c, s, p->id, NULL);
            json_array_append_new(offs, json_integer((json_int_t)*offset));
            *offset += json_string_length(tok);
            json_array_append_new(toks, tok);
            json_array_append_new(lps, json_real(p->lp));
            json_t *alt = json_object();
            for (int k = 0; k < p->n_top; k++) {
                json_t *tt = token_text(c, s, p->top_id[k], NULL);
                json_object_set_new(alt, json_string_value(tt), json_real(p->top_lp[k]));
                json_decref(tt);
            }
            json_array_append_new(tops, alt);
        }
        out = json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps,
                        "top_logprobs", tops, "text_offset", offs);
    }
    em_ctx_free(c);
    return out;
}
