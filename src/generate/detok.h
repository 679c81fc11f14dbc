/* Incremental detokenization for streaming: the text each new token completes, decoding only
 * the last few ids per step instead of the whole sequence (which makes streaming quadratic in
 * the output length). */
#ifndef EMBER_DETOK_H
#define EMBER_DETOK_H

#include <stdbool.h>
#include <stddef.h>

#include "ember/tokenizer.h"

/*
 * The state of one sequence, zero-initialised (apart from tok and skip_special). Two offsets
 * into the sequence's ids, as text-generation servers keep them: ids[prefix, read) were decoded
 * already and give the context that decoders need (sentencepiece's leading space, WordPiece's
 * "##" joins, byte-level BPE pieces of one character), ids[read, n) are new. Each step decodes
 * ids[prefix, read) and ids[prefix, n); what the second adds to the first is the new text, once
 * it does not end inside an incomplete UTF-8 character (U+FFFD). When the shorter decode is not
 * a prefix of the longer, complete one (a decoder whose output depends on more context), the
 * step falls back to decoding the whole sequence; while the longer one is incomplete, nothing
 * is emitted (byte-fallback decoders turn a whole run of byte tokens into U+FFFD until its last
 * character is complete, the prefix's last bytes included).
 */
typedef struct em_detok {
    const em_tokenizer *tok;
    bool skip_special;
    size_t prefix, read;   /* token offsets, see above */
    char *text;            /* the text emitted so far (text_len bytes, NUL-terminated) */
    size_t text_len, text_cap;
    char *tail;            /* decoded after `text` but not emitted: it ends in an incomplete
                              character (tail_len bytes, NUL-terminated; may be empty) */
    size_t tail_len, tail_cap;
    int64_t fallbacks;     /* steps that decoded the whole sequence */
} em_detok;

/*
 * Adds ids[n - 1] (ids holds the sequence so far, n >= 1, one more than at the previous step).
 * On EM_OK *piece points at the text this token completes (inside d->text, NUL-terminated,
 * valid until the next step; "" when it completes none) or is NULL when the text now ends
 * inside an incomplete character (d->tail holds it). Errors are recorded in c.
 */
em_status em_detok_step(em_ctx *c, em_detok *d, const em_token *ids, size_t n,
                        const char **piece);

/* Frees the buffers (not the tokenizer). */
void em_detok_free(em_detok *d);

#endif
