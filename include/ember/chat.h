/*
 * ember/chat.h — chat templates: turn a conversation into the prompt text a model expects.
 *
 * A Hugging Face checkpoint ships its prompt format as a Jinja2 template (the "chat_template"
 * string of tokenizer_config.json, or chat_template.jinja). Ember interprets the subset of Jinja2
 * that the Hub's templates use and renders exactly what transformers'
 * `tokenizer.apply_chat_template(messages, tokenize=False, ...)` returns: the same jinja2 settings
 * (sandboxed, trim_blocks, lstrip_blocks, loop controls, the {% generation %} tag), the same
 * globals (raise_exception, strftime_now, namespace, dict, range) and the same custom `tojson`.
 *
 *     em_chat_template *t = em_chat_template_compile(c, template_source);
 *     char *prompt = em_chat_template_render(c, t,
 *         "[{\"role\":\"user\",\"content\":\"Hi!\"}]", true,
 *         "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}");
 *     if (!prompt) fprintf(stderr, "%s\n", em_ctx_error(c)->message);
 *     em_free(prompt);
 *     em_chat_template_free(t);
 *
 * Supported: {{ }}, {% %}, {# #}, whitespace control (-, +), raw; for (else, inline if, tuple
 * targets, the loop object: index, index0, revindex(0), first, last, length, depth, previtem,
 * nextitem, cycle, changed), break / continue, if / elif / else, set (also set blocks with
 * filters and namespace attributes), macro (defaults, varargs, kwargs, caller), call blocks,
 * filter blocks, with, print, generation; namespace(), range(), dict(); every operator with
 * Python's semantics (floor division and modulo signs, str and list repetition, `in`, chained
 * comparisons, ~, inline if); the filters abs, attr, capitalize, center, count, d/default,
 * dictsort, e/escape, first, float, forceescape, format, indent, int, items, join, last,
 * length, list, lower, map, max, min, reject, rejectattr, replace, reverse, round, safe,
 * select, selectattr, sort, string, sum, title, tojson, trim, truncate, unique, upper,
 * wordcount; every jinja2 test; the str methods templates call (split, rsplit, strip, lstrip,
 * rstrip, startswith, endswith, replace, find, count, join, format, upper, lower, title,
 * capitalize, splitlines, partition, is*, ...), dict.get / items / keys / values, list.index /
 * count; Markup from |safe and |escape; Python's Unicode case mappings, str(), repr() and
 * json.dumps() output.
 *
 * Not supported (an error naming the construct and its line and column, EM_ERR_UNSUPPORTED,
 * never a silently different output): include / import / extends / block, recursive loops,
 * the filters batch, filesizeformat, groupby, pprint, random, slice, striptags, urlencode,
 * urlize, wordwrap, xmlattr, the globals cycler, joiner, lipsum, a few str methods (encode,
 * translate, casefold, ...), printing objects whose Python text is a memory address
 * (generators, methods), non-ASCII identifiers, \N{...} escapes. Python integers are unbounded;
 * Ember's are 64-bit and an overflow is an error (EM_ERR_OVERFLOW).
 *
 * Errors, all recorded in the caller's context under the name "chat_template":
 *   EM_ERR_FORMAT       syntax error in the template, malformed JSON input
 *   EM_ERR_UNSUPPORTED  a valid Jinja2 construct, filter, test or method Ember does not implement
 *   EM_ERR_INVALID_ARG  the template failed while rendering this input: raise_exception(), an
 *                       undefined attribute of an undefined value, a type error ("TypeError: ...",
 *                       named like the Python exception jinja2 would raise), or a bad argument
 *   EM_ERR_OVERFLOW     a resource limit: output size, working memory, evaluation steps, nesting
 *                       depth, or a 64-bit integer overflow
 *   EM_ERR_OOM          out of memory
 * Like every Ember call, both functions return NULL at once, recording nothing, when the context
 * already holds an error.
 */
#ifndef EMBER_CHAT_H
#define EMBER_CHAT_H

#include <stdbool.h>

#include "ember/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A compiled chat template (immutable; may be rendered from several threads at once). */
typedef struct em_chat_template em_chat_template;

/**
 * Compiles `source`, a UTF-8 Jinja2 chat template. Returns NULL and records EM_ERR_FORMAT (syntax
 * error, with line and column) or EM_ERR_UNSUPPORTED (a construct Ember does not implement, e.g.
 * {% include %}) on failure. The template keeps its own copy of the source. Free with
 * em_chat_template_free.
 */
EM_API em_chat_template *em_chat_template_compile(em_ctx *c, const char *source);

/** Releases a template. NULL is a no-op. */
EM_API void em_chat_template_free(em_chat_template *t);

/**
 * Renders the template for one conversation.
 *
 * messages_json: a JSON array of message objects ({"role": ..., "content": ...}, plus any other
 *   field a template reads: "tool_calls", "reasoning_content", ...). As apply_chat_template does,
 *   keys whose value is null are dropped, "reasoning_content" / "thinking" / "reasoning" are
 *   aliased to one another, and an empty conversation is an error.
 * add_generation_prompt: the template variable of that name.
 * extra_vars_json: NULL or a JSON object whose members become template variables: the special
 *   tokens (bos_token, eos_token, ...), "tools" and "documents" (null when absent, as in
 *   transformers), and any keyword a template reads (enable_thinking, date_string, ...).
 *   "messages" and "add_generation_prompt" may not appear there.
 *
 * Returns the rendered UTF-8 text, NUL-terminated, which the caller frees with em_free(); NULL on
 * error with the error recorded in `c` (see the top of this file). A rendering that would contain
 * a U+0000 character is reported as an error rather than truncated.
 */
EM_API char *em_chat_template_render(em_ctx *c, const em_chat_template *t,
                                     const char *messages_json, bool add_generation_prompt,
                                     const char *extra_vars_json);

/**
 * transformers' tokenizer.apply_chat_template(messages, tokenize=False), the function most
 * callers want (em_chat_template_render is its engine, for a template compiled by the caller):
 * renders `messages_json` with the tokenizer's
 * default chat template, passing its special tokens (bos_token, eos_token, pad_token, unk_token,
 * sep_token, cls_token, mask_token, when named) as transformers does, plus the members of
 * extra_vars_json (may be NULL). Returns a string the caller frees with em_free(), or NULL with
 * the error recorded (EM_ERR_NOT_FOUND when the tokenizer has no template).
 */
struct em_tokenizer;
EM_API char *em_chat_template_apply(em_ctx *c, const struct em_tokenizer *tok,
                                    const char *messages_json, bool add_generation_prompt,
                                    const char *extra_vars_json);

#ifdef __cplusplus
}
#endif
#endif
