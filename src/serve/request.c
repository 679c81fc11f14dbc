/* Request bodies of the OpenAI endpoints (request.h). Every check names the parameter, as
 * OpenAI's errors do; options the server cannot honour are refused rather than ignored. */
#include "serve/request.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool srv_fail(srv_error *err, int http, const char *type, const char *param, const char *fmt,
              ...) {
    err->http = http;
    err->type = type;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

#define BAD(param, ...) srv_fail(err, 400, "invalid_request_error", param, __VA_ARGS__)

void srv_request_free(srv_request *r) {
    if (!r) return;
    free(r->model);
    free(r->messages_json);
    free(r->prompt);
    free(r->tokens);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    for (size_t i = 0; i < r->n_inputs; i++) free(r->inputs[i]);
    free(r->inputs);
    memset(r, 0, sizeof *r);
}

/* A member that is absent or JSON null counts as not given. */
static json_t *opt(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

static bool get_number(json_t *o, const char *key, double lo, double hi, bool *has, double *out,
                       srv_error *err) {
    json_t *v = opt(o, key);
    if (!v) return true;
    if (!json_is_number(v)) return BAD(key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return BAD(key, "'%s' is %g; it must lie in [%g, %g]", key, x, lo, hi);
    *has = true;
    *out = x;
    return true;
}

static bool get_int(json_t *o, const char *key, long long lo, long long hi, bool *has,
                    long long *out, srv_error *err) {
    json_t *v = opt(o, key);
    if (!v) return true;
    if (!json_is_integer(v)) return BAD(key, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return BAD(key, "'%s' is %lld; it must lie in [%lld, %lld]", key, x, lo, hi);
    *has = true;
    *out = x;
    return true;
}

/* Options this server does not implement: refused when set to anything but their neutral value. */
static bool refuse_unsupported(json_t *o, srv_kind kind, srv_error *err) {
    json_t *v = opt(o, "best_of");
    if (v && (!json_is_integer(v) || json_integer_value(v) != 1))
        return BAD("best_of", "'best_of' other than 1 is not supported");
    v = opt(o, "echo");
    if (v && !json_is_false(v)) return BAD("echo", "'echo' is not supported yet");
    v = opt(o, "suffix");
    if (v) return BAD("suffix", "'suffix' is not supported");
    v = opt(o, "tools");
    if (v && !(json_is_array(v) && json_array_size(v) == 0))
        return BAD("tools", "'tools' (function calling) is not supported yet");
    return true;
}

/* response_format: {"type": "text"} (the default) or {"type": "json_object"} (JSON mode). */
static bool get_response_format(json_t *o, srv_request *r, srv_error *err) {
    json_t *v = opt(o, "response_format");
    if (!v) return true;
    json_t *t = json_object_get(v, "type");
    const char *type = json_is_string(t) ? json_string_value(t) : NULL;
    if (!json_is_object(v) || !type)
        return BAD("response_format", "'response_format' must be an object with a string 'type'");
    if (!strcmp(type, "json_object")) r->json_object = true;
    else if (!strcmp(type, "json_schema"))
        return BAD("response_format", "response_format 'json_schema' is not supported yet; "
                                      "'json_object' (any JSON object) is");
    else if (strcmp(type, "text"))
        return BAD("response_format", "response_format type '%.40s': expected 'text' or "
                                      "'json_object'", type);
    return true;
}

/* messages -> a JSON array of {"role", "content"} with string contents (text parts joined). */
static bool get_messages(json_t *msgs, char **out, srv_error *err) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return BAD("messages", "'messages' must be a non-empty array");
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    json_t *clean = json_array();
    size_t i;
    json_t *m;
    bool ok = clean != NULL;
    json_array_foreach(msgs, i, m) {
        if (!ok) break;
        char param[40];
        snprintf(param, sizeof param, "messages[%zu]", i);
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_object(m) || !json_is_string(role)) {
            ok = BAD(param, "%s must be an object with a string 'role'", param);
            break;
        }
        bool known = false;
        for (size_t k = 0; k < sizeof roles / sizeof *roles; k++)
            known |= !strcmp(json_string_value(role), roles[k]);
        if (!known) {
            ok = BAD(param, "%s has role '%.40s'; expected system, developer, user, assistant or "
                            "tool", param, json_string_value(role));
            break;
        }
        json_t *text = NULL;
        if (json_is_string(content)) {
            text = json_incref(content);
        } else if (json_is_null(content) || !content) {
            text = json_string("");
        } else if (json_is_array(content)) { /* [{"type": "text", "text": ...}, ...] */
            size_t j, len = 0;
            json_t *part;
            char *joined = calloc(1, 1);
            json_array_foreach(content, j, part) {
                json_t *type = json_object_get(part, "type"), *t = json_object_get(part, "text");
                if (!json_is_string(type) || strcmp(json_string_value(type), "text") ||
                    !json_is_string(t)) {
                    free(joined);
                    joined = NULL;
                    ok = BAD(param, "%s: only content parts {\"type\": \"text\", \"text\": ...} "
                                    "are supported", param);
                    break;
                }
                size_t tl = json_string_length(t);
                char *nj = joined ? realloc(joined, len + tl + 1) : NULL;
                if (!nj) {
                    free(joined);
                    joined = NULL;
                    ok = srv_fail(err, 500, "server_error", "", "out of memory");
                    break;
                }
                joined = nj;
                memcpy(joined + len, json_string_value(t), tl);
                joined[len += tl] = 0;
            }
            if (joined) text = json_stringn(joined, len);
            free(joined);
            if (!ok) break;
        } else {
            ok = BAD(param, "%s: 'content' must be a string or an array of text parts", param);
            break;
        }
        json_t *row = json_pack("{s:O, s:o}", "role", role, "content", text);
        if (!row || json_array_append_new(clean, row)) {
            ok = srv_fail(err, 500, "server_error", "", "out of memory");
            break;
        }
    }
    if (ok) {
        *out = json_dumps(clean, JSON_COMPACT);
        if (!*out) ok = srv_fail(err, 500, "server_error", "", "out of memory");
    }
    json_decref(clean);
    return ok;
}

static bool get_prompt(json_t *o, char **out, srv_error *err) {
    json_t *p = json_object_get(o, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (!json_is_string(p))
        return BAD("prompt", "'prompt' must be a string (or an array of one string)");
    *out = strdup(json_string_value(p));
    return *out ? true : srv_fail(err, 500, "server_error", "", "out of memory");
}

static bool get_stop(json_t *o, srv_request *r, srv_error *err) {
    json_t *s = opt(o, "stop");
    if (!s) return true;
    json_t *one[1] = {s};
    size_t n = json_is_array(s) ? json_array_size(s) : 1;
    if (n > SRV_MAX_STOP) return BAD("stop", "'stop' holds at most %d strings", SRV_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_array(s) ? json_array_get(s, i) : one[0];
        if (!json_is_string(v) || json_string_length(v) == 0)
            return BAD("stop", "'stop' must be a non-empty string or an array of them");
        if (!(r->stop[r->n_stop] = strdup(json_string_value(v))))
            return srv_fail(err, 500, "server_error", "", "out of memory");
        r->n_stop++;
    }
    return true;
}

static bool parse_generation(json_t *o, srv_request *r, srv_error *err) {
    if (!refuse_unsupported(o, r->kind, err) || !get_response_format(o, r, err)) return false;
    if (r->kind == SRV_CHAT ? !get_messages(json_object_get(o, "messages"), &r->messages_json, err)
                            : !get_prompt(o, &r->prompt, err))
        return false;
    bool has = false;
    long long v = -1;
    const char *mt = opt(o, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (!get_int(o, mt, 1, INT32_MAX, &has, &v, err)) return false;
    r->max_tokens = has ? v : -1;
    if (!get_number(o, "temperature", 0, 2, &r->has_temperature, &r->temperature, err) ||
        !get_number(o, "top_p", 0, 1, &r->has_top_p, &r->top_p, err))
        return false;
    if (r->has_top_p && r->top_p <= 0) return BAD("top_p", "'top_p' must be greater than 0");
    /* OpenAI's range; 0 (the default) is off */
    if (!get_number(o, "presence_penalty", -2, 2, &has, &r->presence_penalty, err) ||
        !get_number(o, "frequency_penalty", -2, 2, &has, &r->frequency_penalty, err))
        return false;
    long long k = 0;
    if (!get_int(o, "top_k", -1, INT32_MAX, &r->has_top_k, &k, err)) return false;
    r->top_k = k > 0 ? k : 0; /* -1 and 0: off */
    long long seed = 0;
    if (!get_int(o, "seed", INT64_MIN, INT64_MAX, &r->has_seed, &seed, err)) return false;
    r->seed = (uint64_t)seed;
    if (!get_stop(o, r, err)) return false;
    bool has_n = false;
    long long n_choices = 1;
    if (!get_int(o, "n", 1, SRV_MAX_N, &has_n, &n_choices, err)) return false;
    r->n = (int)n_choices;
    /* chat: logprobs true/false and top_logprobs 0-20; completions: logprobs 0-5 (alternatives) */
    json_t *lp = opt(o, "logprobs");
    r->logprobs = -1;
    if (r->kind == SRV_CHAT) {
        if (lp && !json_is_boolean(lp)) return BAD("logprobs", "'logprobs' must be a boolean");
        bool has_top = false;
        long long top = 0;
        if (!get_int(o, "top_logprobs", 0, 20, &has_top, &top, err)) return false;
        if (has_top && !json_is_true(lp))
            return BAD("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
        if (json_is_true(lp)) r->logprobs = (int)top;
    } else {
        bool has_lp = false;
        long long n_lp = 0;
        if (!json_is_false(lp) && !get_int(o, "logprobs", 0, 5, &has_lp, &n_lp, err)) return false;
        if (has_lp) r->logprobs = (int)n_lp;
        if (opt(o, "top_logprobs"))
            return BAD("top_logprobs", "completions take the count in 'logprobs' (0-5)");
    }
    json_t *st = opt(o, "stream");
    if (st && !json_is_boolean(st)) return BAD("stream", "'stream' must be a boolean");
    r->stream = json_is_true(st);
    json_t *so = opt(o, "stream_options");
    if (so) {
        if (!r->stream) return BAD("stream_options", "'stream_options' needs \"stream\": true");
        json_t *iu = opt(so, "include_usage");
        if (!json_is_object(so) || (iu && !json_is_boolean(iu)))
            return BAD("stream_options", "'stream_options' must be {\"include_usage\": bool}");
        r->include_usage = json_is_true(iu);
    }
    return true;
}

static bool parse_tokenize(json_t *o, srv_request *r, srv_error *err) {
    json_t *msgs = json_object_get(o, "messages");
    if (msgs) {
        if (!get_messages(msgs, &r->messages_json, err)) return false;
    } else if (!get_prompt(o, &r->prompt, err)) {
        return false;
    }
    json_t *ast = opt(o, "add_special_tokens");
    if (ast && !json_is_boolean(ast))
        return BAD("add_special_tokens", "'add_special_tokens' must be a boolean");
    r->add_special_tokens = ast ? json_is_true(ast) : !msgs;
    return true;
}

static bool parse_detokenize(json_t *o, srv_request *r, srv_error *err) {
    json_t *t = json_object_get(o, "tokens");
    if (!json_is_array(t)) return BAD("tokens", "'tokens' must be an array of token ids");
    r->n_tokens = json_array_size(t);
    r->tokens = malloc((r->n_tokens + 1) * sizeof *r->tokens);
    if (!r->tokens) return srv_fail(err, 500, "server_error", "", "out of memory");
    for (size_t i = 0; i < r->n_tokens; i++) {
        json_t *v = json_array_get(t, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return BAD("tokens", "tokens[%zu] is not a token id (an integer >= 0)", i);
        r->tokens[i] = (int32_t)json_integer_value(v);
    }
    return true;
}

static bool parse_embeddings(json_t *o, srv_request *r, srv_error *err) {
    json_t *in = json_object_get(o, "input");
    json_t *one[1] = {in};
    size_t n = json_is_array(in) ? json_array_size(in) : 1;
    if (!in || (!json_is_string(in) && !json_is_array(in)))
        return BAD("input", "'input' must be a string or an array of strings");
    if (n == 0 || n > SRV_MAX_INPUTS)
        return BAD("input", "'input' must hold 1 to %d texts", SRV_MAX_INPUTS);
    if (!(r->inputs = calloc(n, sizeof *r->inputs)))
        return srv_fail(err, 500, "server_error", "", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_array(in) ? json_array_get(in, i) : one[0];
        if (json_is_integer(v) || json_is_array(v))
            return BAD("input", "token-id inputs are not supported; send the texts");
        if (!json_is_string(v) || json_string_length(v) == 0)
            return BAD("input", "input[%zu] must be a non-empty string", i);
        if (!(r->inputs[i] = strdup(json_string_value(v))))
            return srv_fail(err, 500, "server_error", "", "out of memory");
        r->n_inputs++;
    }
    json_t *f = opt(o, "encoding_format");
    if (f && (!json_is_string(f) || (strcmp(json_string_value(f), "float") &&
                                     strcmp(json_string_value(f), "base64"))))
        return BAD("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    r->base64 = f && !strcmp(json_string_value(f), "base64");
    if (opt(o, "dimensions"))
        return BAD("dimensions", "'dimensions' is not supported: the model's own size is returned");
    return true;
}

bool srv_request_parse(const char *body, size_t n, srv_kind kind, srv_request *out,
                       srv_error *err) {
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    out->kind = kind;
    out->max_tokens = -1;
    out->logprobs = -1;
    out->n = 1;
    json_error_t je;
    json_t *o = json_loadb(body ? body : "", body ? n : 0, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return BAD("", "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line,
                   je.column);
    bool ok;
    json_t *model = opt(o, "model");
    if (!json_is_object(o)) {
        ok = BAD("", "the body must be a JSON object");
    } else if (model && !json_is_string(model)) {
        ok = BAD("model", "'model' must be a string");
    } else if (model && !(out->model = strdup(json_string_value(model)))) {
        ok = srv_fail(err, 500, "server_error", "", "out of memory");
    } else {
        switch (kind) {
        case SRV_CHAT:
        case SRV_COMPLETION: ok = parse_generation(o, out, err); break;
        case SRV_TOKENIZE: ok = parse_tokenize(o, out, err); break;
        case SRV_EMBEDDINGS: ok = parse_embeddings(o, out, err); break;
        default: ok = parse_detokenize(o, out, err); break;
        }
    }
    json_decref(o);
    if (!ok) srv_request_free(out);
    return ok;
}
