/* JSON mode: a byte-at-a-time recognizer of one JSON object (RFC 8259), small enough to copy
 * per candidate token, so that decoding can mask every token whose bytes would leave the
 * output unable to become valid JSON. Used by the server's response_format {"type":
 * "json_object"}. Strings may hold any byte >= 0x20 but '"' and '\' unescaped (UTF-8 is not
 * re-validated: the tokenizer's pieces are UTF-8 already). */
#ifndef EMBER_JSON_GRAMMAR_H
#define EMBER_JSON_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EM_JSON_MAX_DEPTH 64 /* nesting the container stack holds (one bit per level) */
#define EM_JSON_MAX_SPACE 8  /* whitespace bytes in a row: a model cannot pad forever */

typedef struct em_json_state {
    uint64_t stack;   /* bit d set: the container at depth d is an array, else an object */
    uint8_t depth;    /* open containers */
    uint8_t mode;     /* what the next byte may be (json_grammar.c) */
    uint8_t sub;      /* position inside a literal, \u escape or number */
    uint8_t spaces;   /* whitespace bytes in a row */
    bool key;         /* the string being read is an object key */
} em_json_state;

/* The state before the first byte: whitespace, then '{'. */
void em_json_init(em_json_state *s);
/* Feeds n bytes. false (s then undefined) when they cannot continue a JSON object. */
bool em_json_feed(em_json_state *s, const char *bytes, size_t n);
/* The bytes so far are one complete JSON object (nothing may follow but the end). */
bool em_json_complete(const em_json_state *s);

#endif
