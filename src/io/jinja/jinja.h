/*
 * jinja.h — private interface of the chat-template interpreter (the Jinja2 subset of the Hub's
 * chat templates, with Python's value semantics). Public API: include/ember/chat.h.
 *
 * Pipeline: jinja_lexer.c turns the source into tokens the way jinja2's lexer does (trim_blocks,
 * lstrip_blocks, "-"/"+" whitespace control), jinja_parser.c builds an AST, jinja_eval.c walks it.
 * Values behave like the Python objects jinja2 would hold (jinja_value.c: truthiness, equality,
 * ordering, str() and repr(); jinja_ops.c: operators, attribute and item access), and
 * jinja_filters.c / jinja_tests.c / jinja_methods.c implement the builtins templates call.
 *
 * Memory: everything a compile or a render allocates comes from one arena (jarena) released at
 * the end, so cyclic structures (a macro closing over the scope that holds it, a namespace that
 * holds itself) cost nothing to free. Errors longjmp back to the entry point (jfail), which is
 * safe because nothing outside the arena is owned by the code in between.
 *
 * Internal names carry one of five prefixes: jinja_ (compile and render: lexer, parser, checks),
 * jmem_ (the arena, output buffers and failure), ju_ (Unicode and text), jv_ (values: str, list,
 * dict, iterators) and jrt_ (the evaluator: scopes, calls, operators, arguments, formatting,
 * JSON).
 */
#ifndef EMBER_IO_JINJA_H
#define EMBER_IO_JINJA_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ember/chat.h"
#include "ember/core.h"

/* ---------------------------------------------------------------------------------------------
 * Limits: they make hostile templates fail with a clear error instead of exhausting the machine.
 * ------------------------------------------------------------------------------------------- */
typedef struct jinja_limits {
    size_t max_source;    /* bytes of template source */
    size_t max_output;    /* bytes of rendered text */
    size_t max_memory;    /* bytes a single render may allocate (its arena) */
    uint64_t max_steps;   /* evaluation steps of one render (nodes evaluated + items processed) */
    int max_depth;        /* nesting of the evaluator: expressions, statements and macro calls */
    int max_parse_depth;  /* nesting of the parser (brackets, unary operators, blocks) */
    int max_height;       /* height of the syntax tree (long operator chains, elif chains) */
    int max_macro_depth;  /* macro calls active at once */
} jinja_limits;

jinja_limits jinja_default_limits(void);
/* Changes the limits a compiled template renders under (tests and fuzzing use tighter ones). */
void jinja_template_set_limits(em_chat_template *t, const jinja_limits *lim);

/* ---------------------------------------------------------------------------------------------
 * Failure: the first error, then a longjmp to the entry point.
 * ------------------------------------------------------------------------------------------- */
typedef struct jfail {
    jmp_buf jb;
    em_status status;
    char msg[720];
    const char *src; /* normalized template source, to turn an offset into line:column */
    size_t src_len;
} jfail;

#define JPOS_NONE UINT32_MAX
_Noreturn void jmem_fail_at(jfail *f, em_status s, uint32_t pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void jmem_linecol(const char *src, size_t len, uint32_t pos, int *line, int *col);

/* ---------------------------------------------------------------------------------------------
 * Arena and growable byte buffers.
 * ------------------------------------------------------------------------------------------- */
typedef struct jchunk jchunk;
typedef struct jarena {
    jchunk *head;
    char *cur, *end;
    size_t total; /* bytes taken from malloc */
    size_t limit; /* 0: none */
    jfail *fail;
} jarena;

void jmem_init(jarena *a, jfail *f, size_t limit);
void jmem_free(jarena *a);
void *jmem_alloc(jarena *a, size_t n);                   /* 16-byte aligned, uninitialised */
void *jmem_zalloc(jarena *a, size_t n);                  /* zeroed */
void *jmem_grow(jarena *a, void *p, size_t old,
                size_t n); /* like realloc (old block is abandoned) */
char *jmem_strndup(jarena *a, const char *s, size_t n);

typedef struct jbuf {
    char *p;
    size_t n, cap;
    size_t limit; /* 0: none; beyond it the render fails with EM_ERR_OVERFLOW */
    jarena *a;
} jbuf;
void jmem_buf_init(jbuf *b, jarena *a, size_t limit);
void jmem_put(jbuf *b, const char *s, size_t n);
void jmem_puts(jbuf *b, const char *s);
void jmem_putc(jbuf *b, char c);
void jmem_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void jmem_put_cp(jbuf *b, uint32_t cp); /* UTF-8 encodes one code point */

/* ---------------------------------------------------------------------------------------------
 * Unicode helpers with Python's definitions (str.isspace, str.isprintable, full case mappings).
 * ------------------------------------------------------------------------------------------- */
/* Decodes one UTF-8 sequence at s[*i] (advancing *i); invalid bytes decode as U+FFFD. */
uint32_t ju_decode(const char *s, size_t n, size_t *i);
size_t ju_count(const char *s, size_t n);           /* code points */
size_t ju_offset(const char *s, size_t n, size_t cp); /* byte offset of code point `cp` */
bool ju_isspace(uint32_t cp);
bool ju_isprintable(uint32_t cp);
bool ju_iscased(uint32_t cp);
bool ju_islower(uint32_t cp);
bool ju_isupper(uint32_t cp);
bool ju_isalpha(uint32_t cp);
bool ju_isalnum(uint32_t cp);
bool ju_isdigit_ascii(uint32_t cp);
/* Python's per-character classes: "decimal", "digit", "numeric", "title". */
bool ju_class(const char *which, uint32_t cp);
/* Appends the full (SpecialCasing) mapping of cp. */
void ju_put_upper(jbuf *b, uint32_t cp);
void ju_put_lower(jbuf *b, uint32_t cp);
void ju_put_title(jbuf *b, uint32_t cp);
/* Python's str.lower() of a whole string (handles the final sigma). */
void ju_lower_str(jbuf *b, const char *s, size_t n);
/* Lower-cases the code point cp found at s[start:end], in the context of s (final sigma). */
void ju_put_lower_at(jbuf *b, const char *s, size_t n, size_t start, size_t end, uint32_t cp);

/* ---------------------------------------------------------------------------------------------
 * Values.
 * ------------------------------------------------------------------------------------------- */
typedef enum jv_kind {
    JV_UNDEF = 0, /* jinja2's Undefined */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_TUPLE,
    JV_DICT,
    JV_NS,    /* namespace() */
    JV_FUNC,  /* builtin function or bound method */
    JV_MACRO, /* {% macro %} or the caller of a {% call %} */
    JV_LOOP,  /* the `loop` variable */
    JV_ITER,  /* a one-shot Python iterator (generator, reversed) */
    JV_VIEW,  /* dict.items() / keys() / values() */
    JV_RANGE,
    JV_KIND_COUNT
} jv_kind;

typedef struct jstr {
    size_t len; /* bytes */
    size_t ncp; /* code points */
    char s[];   /* NUL-terminated */
} jstr;

typedef struct jv jv;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jfunc jfunc;
typedef struct jmacro jmacro;
typedef struct jloop jloop;
typedef struct jiter jiter;
typedef struct jview jview;
typedef struct jrange jrange;
typedef struct jundef jundef;
typedef struct jrt jrt;
typedef struct jnode jnode;

struct jv {
    uint8_t k;      /* jv_kind */
    uint8_t markup; /* JV_STR: a markupsafe.Markup (from |safe or |escape) */
    union {
        bool b;
        int64_t i;
        double f;
        jstr *s;
        jlist *l; /* JV_LIST, JV_TUPLE */
        jdict *d; /* JV_DICT, JV_NS */
        jfunc *fn;
        jmacro *m;
        jloop *lp;
        jiter *it;
        jview *vw;
        jrange *r;
        jundef *u; /* NULL: a plain undefined name without details */
    };
};

struct jlist {
    size_t n, cap;
    jv *v;
};
struct jdict {
    size_t n, cap;
    jv *keys, *vals; /* insertion order, as Python dicts */
};

/* Why a value is undefined, for the message an operation on it raises. */
typedef enum jundef_kind {
    JU_NAME = 0,  /* 'x' is undefined */
    JU_ATTR,      /* 'dict object' has no attribute 'x' */
    JU_ITEM,      /* list object has no element 3 */
    JU_HINT,      /* free text */
    JU_UNSAFE     /* sandbox: calling it raises SecurityError */
} jundef_kind;
struct jundef {
    uint8_t kind;
    const char *name; /* attribute / variable name, or the hint */
    const char *obj;  /* Python type description of the object ("dict object") */
    jv key;           /* JU_ITEM: the index or key */
};

/* One-shot iterators: the items are materialised, `pos` advances as Python's would. A lazy one
 * (a generator filter such as map or select) computes its items when first consumed, so that,
 * as in Python, its errors only surface if something iterates it. */
typedef struct jargs jargs;
struct jiter {
    jlist *items;       /* NULL until a lazy generator has run */
    size_t pos;
    const char *pyname; /* "generator", "list_reverseiterator", ... */
    bool broken;        /* a loop left it half consumed with {% break %} */
    jlist *(*run)(jrt *rt, jiter *it); /* lazy: computes the items */
    jv src;
    jargs *args;
    const jnode *at;
};
/* Runs a lazy iterator (no-op otherwise) and reports reuse after a {% break %}. */
void jv_iter_force(jrt *rt, const jnode *at, jiter *it);
struct jview {
    jdict *d;
    uint8_t which; /* 0 keys, 1 values, 2 items */
};
struct jrange {
    int64_t start, stop, step;
};

typedef struct jscope jscope;

struct jmacro {
    const jnode *def; /* JN_MACRO or JN_CALL_BLOCK */
    jscope *closure;
    const char *name;
};

struct jloop {
    jlist *items;
    int64_t index0;
    int depth0;
    jv last_changed;
    bool changed_called;
};

typedef jv (*jfunc_impl)(jrt *rt, const jnode *at, jv self, jargs *a);
struct jfunc {
    const char *name;     /* "upper", "range", ... */
    const char *owner;    /* Python type of `self` ("str", "dict") or NULL for globals */
    jfunc_impl impl;      /* NULL: exists in Python but Ember does not implement it */
    jv self;
};

/* Arguments of a call: positional then keyword. */
struct jargs {
    jv *pos;
    int npos;
    const char **kwn;
    jv *kwv;
    int nkw;
};

/* Constructors. */
static inline jv jv_undef(void) { jv v = {0}; return v; }
static inline jv jv_none(void) { jv v = {0}; v.k = JV_NONE; return v; }
static inline jv jv_bool(bool b) { jv v = {0}; v.k = JV_BOOL; v.b = b; return v; }
static inline jv jv_int(int64_t i) { jv v = {0}; v.k = JV_INT; v.i = i; return v; }
static inline jv jv_float(double f) { jv v = {0}; v.k = JV_FLOAT; v.f = f; return v; }
jv jv_str(jarena *a, const char *s, size_t n);
jv jv_cstr(jarena *a, const char *s);
jv jv_str_buf(jbuf *b); /* takes the bytes of b (b is reset) */
jv jv_list_new(jarena *a, size_t cap);
jv jv_tuple_new(jarena *a, size_t cap);
void jv_list_push(jarena *a, jlist *l, jv v);
jv jv_dict_new(jarena *a, size_t cap);
jv jv_undef_name(jarena *a, const char *name);
jv jv_undef_attr(jarena *a, jv obj, const char *name);
jv jv_undef_item(jarena *a, jv obj, jv key);
jv jv_undef_hint(jarena *a, const char *hint);
jv jv_undef_unsafe(jarena *a, jv obj, const char *attr);
jv jv_iter_new(jarena *a, jlist *items, const char *pyname);

/* Dicts (keys compared with Python's ==, only hashable keys). */
jv *jv_dict_get(jdict *d, jv key);           /* NULL when absent */
jv *jv_dict_get_str(jdict *d, const char *key, size_t n);
void jv_dict_set(jrt *rt, jdict *d, jv key, jv val); /* replace in place or append */

/* Semantics shared by the evaluator and the builtins. */
const char *jv_typename(jv v);       /* Python type name: "str", "dict", "NoneType", ... */
bool jv_truthy(jrt *rt, const jnode *at, jv v);
bool jv_equal(jrt *rt, jv a, jv b);
int jv_compare(jrt *rt, const jnode *at, jv a, jv b, const char *opname); /* <0, 0, >0 */
bool jv_hashable(jv v);
bool jv_is_str(jv v);
bool jv_is_number(jv v); /* int, float or bool */
double jv_as_double(jv v);
/* Python's len(); fails with TypeError for values without one. */
int64_t jv_len(jrt *rt, const jnode *at, jv v);
/* Iterates like Python's iter(): list of items (consumes one-shot iterators). */
jlist *jv_iterate(jrt *rt, const jnode *at, jv v);
/* str() and repr() appended to a buffer. */
void jv_write_str(jrt *rt, const jnode *at, jbuf *b, jv v);
void jv_write_repr(jrt *rt, const jnode *at, jbuf *b, jv v);
jv jv_to_str(jrt *rt, const jnode *at, jv v); /* str(v) as a value (keeps a Markup as is) */
void jv_write_float(jbuf *b, double f);      /* Python's repr(float) */
void jv_write_escaped(jbuf *b, const char *s, size_t n); /* markupsafe.escape */
_Noreturn void jv_raise_undefined(jrt *rt, const jnode *at, jv u);

/* JSON in and out (Python's json.dumps with transformers' tojson arguments). */
typedef struct jrt_json_opts {
    bool ensure_ascii;
    bool sort_keys;
    int indent;             /* -1: none */
    const char *indent_str; /* when the indent is a string (overrides `indent`) */
    const char *item_sep, *key_sep;
} jrt_json_opts;
void jrt_json_dump(jrt *rt, const jnode *at, jbuf *b, jv v, const jrt_json_opts *o);
struct json_t;
jv jrt_json_import(jrt *rt, struct json_t *j);

/* ---------------------------------------------------------------------------------------------
 * Lexer and AST.
 * ------------------------------------------------------------------------------------------- */
typedef enum jtok_kind {
    JT_EOF = 0,
    JT_DATA,
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING,
    JT_INT,
    JT_FLOAT,
    JT_OP
} jtok_kind;

typedef enum jop {
    JO_ADD = 0, JO_SUB, JO_DIV, JO_FLOORDIV, JO_MUL, JO_MOD, JO_POW, JO_TILDE,
    JO_LBRACKET, JO_RBRACKET, JO_LPAREN, JO_RPAREN, JO_LBRACE, JO_RBRACE,
    JO_EQ, JO_NE, JO_GT, JO_GTEQ, JO_LT, JO_LTEQ, JO_ASSIGN, JO_DOT, JO_COLON, JO_PIPE,
    JO_COMMA, JO_SEMICOLON,
    /* comparison operators that are words */
    JO_IN, JO_NOTIN,
    JO_COUNT
} jop;
extern const char *const jrt_op_text[JO_COUNT];

typedef struct jtok {
    uint8_t kind; /* jtok_kind */
    uint8_t op;   /* JT_OP: jop */
    uint32_t pos; /* byte offset in the normalized source */
    const char *s; /* JT_NAME / JT_STRING / JT_DATA: arena copy, NUL-terminated */
    size_t len;
    int64_t i;
    double f;
} jtok;

/* Normalizes newlines (\r\n, \r -> \n) and drops one trailing newline, as jinja2 does. */
char *jinja_normalize_source(jarena *a, const char *src, size_t *len);
jtok *jinja_lex(jarena *a, jfail *f, const char *src, size_t len, size_t *ntok);

typedef enum jn_kind {
    /* statements */
    JN_DATA = 0,   /* cval: text */
    JN_OUTPUT,     /* a: expression to print */
    JN_IF,         /* a: test, l1: body, l2: else (an elif is a JN_IF alone in l2) */
    JN_FOR,        /* a: target, b: iterable, c: filter or NULL, l1: body, l2: else */
    JN_SET,        /* a: target (JN_NAME, JN_TUPLE of names, JN_NSREF), b: value */
    JN_SET_BLOCK,  /* a: target, b: filter chain or NULL, l1: body */
    JN_MACRO,      /* name, l1: params (JN_NAME), l2: defaults (for the last params), l3: body */
    JN_CALL_BLOCK, /* a: the call, l1/l2/l3 as JN_MACRO for the caller */
    JN_FILTER_BLOCK, /* b: filter chain (innermost input NULL), l1: body */
    JN_WITH,       /* l1: targets, l2: values, l3: body */
    JN_GENERATION, /* l3: body (also the root of a template) */
    JN_BREAK,
    JN_CONTINUE,
    /* expressions */
    JN_CONST,   /* cval */
    JN_NAME,    /* name */
    JN_NSREF,   /* name.attr as an assignment target */
    JN_TUPLE,   /* l1 */
    JN_LIST,    /* l1 */
    JN_DICT,    /* l1: keys, l2: values */
    JN_GETATTR, /* a.name */
    JN_GETITEM, /* a[b] */
    JN_SLICE,   /* a:b:c, each may be NULL */
    JN_CALL,    /* a(l1..., kwn=l2..., *b, **c) */
    JN_FILTER,  /* a|name(l1..., kwn=l2..., *b, **c); a NULL in filter blocks */
    JN_TEST,    /* a is name(...) */
    JN_NOT,
    JN_NEG,
    JN_POS,
    JN_AND,
    JN_OR,
    JN_COND,    /* b if a else c (c may be NULL) */
    JN_COMPARE, /* a, then ops[i] l1[i] */
    JN_BINOP,   /* a op b */
    JN_CONCAT,  /* l1 joined with ~ */
    JN_KIND_COUNT
} jn_kind;

typedef struct jnlist {
    jnode **v;
    int n;
} jnlist;

/* Macro bodies read these implicit names (decides whether extra arguments are an error). */
enum { JM_CALLER = 1, JM_VARARGS = 2, JM_KWARGS = 4 };

struct jnode {
    uint8_t kind; /* jn_kind */
    uint8_t op;   /* JN_BINOP: jop */
    uint8_t uses; /* JN_MACRO / JN_CALL_BLOCK: JM_* */
    bool elif;    /* JN_IF made from {% elif %} */
    uint32_t pos;
    uint32_t h;   /* height of the subtree (bounded, so that walking it cannot exhaust the stack) */
    const char *name;
    const char *attr;
    jv cval;
    jnode *a, *b, *c;
    jnlist l1, l2, l3;
    const char **kwn; /* keyword names of l2 (calls, filters, tests) */
    uint8_t *ops;     /* JN_COMPARE */
};

/* Parses the tokens; max_depth bounds bracket/block nesting, max_height the height of the tree. */
jnode *jinja_parse(jarena *a, jfail *f, const jtok *toks, size_t ntok, int max_depth,
                   int max_height);

/* jinja2's compile-time checks: unknown filters and tests outside if-branches; which implicit
 * names (caller, varargs, kwargs) each macro body reads. */
void jinja_check(jfail *f, jnode *root);

/* ---------------------------------------------------------------------------------------------
 * Evaluation.
 * ------------------------------------------------------------------------------------------- */
struct jscope {
    jscope *parent;
    jdict vars; /* keys are JV_STR names */
};

struct jrt {
    jfail *fail;
    jarena *a;
    jbuf *out;
    jscope *globals;
    const jinja_limits *lim;
    uint64_t steps;
    int depth, macro_depth;
    int ctl; /* JC_* after {% break %} / {% continue %} */
};
enum { JC_NONE = 0, JC_BREAK, JC_CONTINUE };

_Noreturn void jrt_fail(jrt *rt, const jnode *at, em_status s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Charges `n` steps against the render's budget. */
void jrt_work(jrt *rt, const jnode *at, uint64_t n);

jv jrt_lookup(jrt *rt, jscope *s, const char *name);
void jrt_set(jrt *rt, jscope *s, const char *name, jv v);
jscope *jrt_scope_new(jrt *rt, jscope *parent);
void jrt_exec_body(jrt *rt, jscope *s, const jnlist *body);
jv jrt_eval(jrt *rt, jscope *s, const jnode *n);
/* Calls any callable value (macro, builtin, method). */
jv jrt_call(jrt *rt, const jnode *at, jv fn, jargs *a);

/* Operators (jinja_ops.c). */
jv jrt_op_binary(jrt *rt, const jnode *at, int op, jv a, jv b);
jv jrt_op_neg(jrt *rt, const jnode *at, jv a, bool neg);
bool jrt_op_contains(jrt *rt, const jnode *at, jv container, jv item);
jv jrt_op_getattr(jrt *rt, const jnode *at, jv obj, const char *name);
jv jrt_op_getitem(jrt *rt, const jnode *at, jv obj, jv key);
jv jrt_op_slice(jrt *rt, const jnode *at, jv obj, jv start, jv stop, jv step);
jv jrt_op_str_concat(jrt *rt, jv a, jv b); /* str + str (Markup aware) */

/* Builtins (jinja_filters.c, jinja_tests.c, jinja_methods.c). */
jv jinja_filter(jrt *rt, const jnode *at, const char *name, jv in, jargs *a);
bool jinja_test(jrt *rt, const jnode *at, const char *name, jv in, jargs *a);
bool jinja_has_filter(const char *name);
bool jinja_has_test(const char *name);
/* Python attribute `name` of a builtin value as a bound method; false if it has none. */
bool jinja_method(jrt *rt, jv self, const char *name, jv *out);
void jinja_install_globals(jrt *rt, jscope *g);
jv jinja_loop_attr(jrt *rt, const jnode *at, jv loop, const char *name);

/* Argument binding for builtins: fills out[i] for params[i] (JV_UNDEF with `missing` set when
 * not given). Fails like Python on extra or unknown arguments. */
void jrt_args_bind(jrt *rt, const jnode *at, const char *fname, jargs *a, const char *const *params,
                int nparams, int nrequired, jv *out, bool *given);
/* Helpers for builtins: the value as a Python str / int, or a TypeError. */
jstr *jrt_arg_str(jrt *rt, const jnode *at, const char *fname, jv v);
int64_t jrt_arg_int(jrt *rt, const jnode *at, const char *fname, jv v);
jv jv_str_result(jrt *rt, jbuf *b, bool markup); /* a new str value, Markup when `markup` */

/* Python str methods that filters share (jinja_str.c). `which` of jv_str_strip: 1 left, 2 right,
 * 3 both; chars JV_NONE (or undefined) strips whitespace. */
jv jv_str_upper(jrt *rt, jv s);
jv jv_str_lower(jrt *rt, jv s);
jv jv_str_capitalize(jrt *rt, jv s);
jv jv_str_title(jrt *rt, jv s);
jv jv_str_strip(jrt *rt, const jnode *at, jv s, jv chars, int which);
jv jv_str_replace(jrt *rt, const jnode *at, jv s, jstr *old, jstr *rep, int64_t count);
jv jv_str_center(jrt *rt, const jnode *at, jv s, int64_t width, const char *fill);
jlist *jv_str_split(jrt *rt, const jnode *at, jv s, jv sep, int64_t maxsplit, bool right);
jlist *jv_str_splitlines(jrt *rt, jv s, bool keepends);
bool jv_str_is(jv s, const char *which); /* str.islower(), isupper(), ... by name */
/* A bound str method (or Markup method) named `name`; false if str has no such attribute. */
bool jv_str_method(jrt *rt, jv self, const char *name, jv *out);

/* String formatting (jinja_format.c): `fmt % args` and str.format(). */
jv jrt_fmt_percent(jrt *rt, const jnode *at, jv fmt, jv args);
jv jrt_fmt_format(jrt *rt, const jnode *at, jv fmt, jargs *a);

#endif
