#include "generate/json_grammar.h"

enum {
    M_START,      /* before the top-level object: whitespace, '{' */
    M_VALUE,      /* a value must come (after ':' or ',' in an array) */
    M_VALUE_OR_CLOSE, /* after '[': a value or ']' */
    M_KEY_OR_CLOSE,   /* after '{': a key or '}' */
    M_KEY,        /* after ',' in an object: a key */
    M_COLON,      /* after a key */
    M_AFTER,      /* after a value inside a container: ',' or the closing bracket */
    M_STRING,
    M_ESCAPE,     /* after '\' in a string */
    M_HEX,        /* sub: hex digits of \uXXXX read so far */
    M_LITERAL,    /* sub: literal index * 8 + bytes matched */
    M_NUM_MINUS,  /* '-' read: a digit must follow */
    M_NUM_ZERO,   /* a leading 0: no more integer digits */
    M_NUM_INT,
    M_NUM_DOT,    /* '.' read: a digit must follow */
    M_NUM_FRAC,
    M_NUM_E,      /* 'e' read: a sign or a digit */
    M_NUM_ESIGN,  /* the exponent's sign read: a digit must follow */
    M_NUM_EXP,
    M_DONE,
};

static const char *const literals[3] = {"true", "false", "null"};

void em_json_init(em_json_state *s) {
    *s = (em_json_state){0};
    s->mode = M_START;
}

bool em_json_complete(const em_json_state *s) { return s->mode == M_DONE; }

static bool is_space(unsigned char b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
static bool is_digit(unsigned char b) { return b >= '0' && b <= '9'; }
static bool is_hex(unsigned char b) {
    return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

/* A value just ended: back to the container, or done at the top. */
static void value_done(em_json_state *s) { s->mode = s->depth ? M_AFTER : M_DONE; }

static bool open_container(em_json_state *s, bool array) {
    if (s->depth >= EM_JSON_MAX_DEPTH) return false;
    if (array) s->stack |= (uint64_t)1 << s->depth;
    else s->stack &= ~((uint64_t)1 << s->depth);
    s->depth++;
    s->mode = array ? M_VALUE_OR_CLOSE : M_KEY_OR_CLOSE;
    return true;
}

static bool close_container(em_json_state *s, bool array) {
    if (!s->depth || ((s->stack >> (s->depth - 1)) & 1) != (uint64_t)array) return false;
    s->depth--;
    value_done(s);
    return true;
}

/* The first byte of a value. */
static bool value_start(em_json_state *s, unsigned char b) {
    switch (b) {
    case '{': return open_container(s, false);
    case '[': return open_container(s, true);
    case '"': s->mode = M_STRING; s->key = false; return true;
    case '-': s->mode = M_NUM_MINUS; return true;
    case '0': s->mode = M_NUM_ZERO; return true;
    case 't': s->mode = M_LITERAL; s->sub = 0 * 8 + 1; return true;
    case 'f': s->mode = M_LITERAL; s->sub = 1 * 8 + 1; return true;
    case 'n': s->mode = M_LITERAL; s->sub = 2 * 8 + 1; return true;
    default:
        if (is_digit(b)) {
            s->mode = M_NUM_INT;
            return true;
        }
        return false;
    }
}

/* A byte after a complete value inside a container. */
static bool after_value(em_json_state *s, unsigned char b) {
    bool array = (s->stack >> (s->depth - 1)) & 1;
    if (b == ',') {
        s->mode = array ? M_VALUE : M_KEY;
        return true;
    }
    return (b == ']' || b == '}') && close_container(s, b == ']');
}

/* A number ended at byte b, which belongs to what follows it. */
static bool number_end(em_json_state *s, unsigned char b) {
    value_done(s);
    if (s->mode == M_DONE) return false; /* not reached: the top level is an object */
    if (is_space(b)) {
        s->spaces = 1;
        return true;
    }
    return after_value(s, b);
}

static bool feed_byte(em_json_state *s, unsigned char b) {
    switch (s->mode) {
    case M_START: case M_VALUE: case M_VALUE_OR_CLOSE: case M_KEY_OR_CLOSE: case M_KEY:
    case M_COLON: case M_AFTER:
        if (is_space(b)) return ++s->spaces <= EM_JSON_MAX_SPACE;
        s->spaces = 0;
        break;
    default:
        break;
    }
    switch (s->mode) {
    case M_START:
        return b == '{' && open_container(s, false);
    case M_VALUE:
        return value_start(s, b);
    case M_VALUE_OR_CLOSE:
        return b == ']' ? close_container(s, true) : value_start(s, b);
    case M_KEY_OR_CLOSE:
        if (b == '}') return close_container(s, false);
        /* fall through */
    case M_KEY:
        if (b != '"') return false;
        s->mode = M_STRING;
        s->key = true;
        return true;
    case M_COLON:
        if (b != ':') return false;
        s->mode = M_VALUE;
        return true;
    case M_AFTER:
        return after_value(s, b);
    case M_STRING:
        if (b == '"') {
            if (s->key) s->mode = M_COLON;
            else value_done(s);
            return true;
        }
        if (b == '\\') s->mode = M_ESCAPE;
        return b >= 0x20;
    case M_ESCAPE:
        if (b == 'u') {
            s->mode = M_HEX;
            s->sub = 0;
            return true;
        }
        s->mode = M_STRING;
        return b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' ||
               b == 'r' || b == 't';
    case M_HEX:
        if (!is_hex(b)) return false;
        if (++s->sub == 4) s->mode = M_STRING;
        return true;
    case M_LITERAL: {
        const char *lit = literals[s->sub / 8];
        int pos = s->sub % 8;
        if ((unsigned char)lit[pos] != b) return false;
        s->sub++;
        if (!lit[pos + 1]) value_done(s);
        return true;
    }
    case M_NUM_MINUS:
        if (!is_digit(b)) return false;
        s->mode = b == '0' ? M_NUM_ZERO : M_NUM_INT;
        return true;
    case M_NUM_ZERO:
    case M_NUM_INT:
        if (is_digit(b) && s->mode == M_NUM_INT) return true;
        if (b == '.') s->mode = M_NUM_DOT;
        else if (b == 'e' || b == 'E') s->mode = M_NUM_E;
        else return number_end(s, b);
        return true;
    case M_NUM_DOT:
        if (!is_digit(b)) return false;
        s->mode = M_NUM_FRAC;
        return true;
    case M_NUM_FRAC:
        if (is_digit(b)) return true;
        if (b == 'e' || b == 'E') {
            s->mode = M_NUM_E;
            return true;
        }
        return number_end(s, b);
    case M_NUM_E:
        if (b == '+' || b == '-') {
            s->mode = M_NUM_ESIGN;
            return true;
        }
        /* fall through */
    case M_NUM_ESIGN:
        if (!is_digit(b)) return false;
        s->mode = M_NUM_EXP;
        return true;
    case M_NUM_EXP:
        return is_digit(b) || number_end(s, b);
    default: /* M_DONE: nothing may follow */
        return false;
    }
}

bool em_json_feed(em_json_state *s, const char *bytes, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!feed_byte(s, (unsigned char)bytes[i])) return false;
    return true;
}
