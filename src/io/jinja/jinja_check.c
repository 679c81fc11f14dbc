/* Chat templates: checks jinja2's compiler makes after parsing. An unknown filter or test is a
 * compile error unless it sits inside an if-statement or an inline if (jinja2's "soft" frames,
 * where it only fails when reached); and a macro decides from its body whether it accepts
 * extra arguments (it does when the body reads `varargs` / `kwargs`) and a `caller`. */
#include <stdio.h>
#include <string.h>

#include "io/jinja/jinja.h"

typedef struct checker {
    jfail *f;
} checker;

static void check(checker *c, const jnode *n, bool soft);

static void check_list(checker *c, const jnlist *l, bool soft) {
    for (int k = 0; k < l->n; k++) check(c, l->v[k], soft);
}

/* Loads of caller / varargs / kwargs anywhere in a body (jinja2's find_undeclared). */
static uint8_t scan_uses(const jnode *n);
static uint8_t scan_list(const jnlist *l) {
    uint8_t u = 0;
    for (int k = 0; k < l->n; k++) u |= scan_uses(l->v[k]);
    return u;
}
static uint8_t scan_uses(const jnode *n) {
    if (!n) return 0;
    uint8_t u = 0;
    if (n->kind == JN_NAME) {
        if (!strcmp(n->name, "caller")) u |= JM_CALLER;
        if (!strcmp(n->name, "varargs")) u |= JM_VARARGS;
        if (!strcmp(n->name, "kwargs")) u |= JM_KWARGS;
        return u;
    }
    /* assignment targets and parameter lists are stores, not loads */
    bool a_is_target = n->kind == JN_SET || n->kind == JN_SET_BLOCK || n->kind == JN_FOR;
    if (!a_is_target) u |= scan_uses(n->a);
    u |= scan_uses(n->b) | scan_uses(n->c);
    if (n->kind != JN_MACRO && n->kind != JN_CALL_BLOCK && n->kind != JN_WITH)
        u |= scan_list(&n->l1);
    u |= scan_list(&n->l2) | scan_list(&n->l3);
    return u;
}

static void check_name(checker *c, const jnode *n, bool soft) {
    bool filter = n->kind == JN_FILTER;
    bool known = filter ? jinja_has_filter(n->name) : jinja_has_test(n->name);
    if (!known && !soft)
        jmem_fail_at(c->f, EM_ERR_FORMAT, n->pos, "syntax error: No %s named '%s'.",
                 filter ? "filter" : "test", n->name);
}

static void check(checker *c, const jnode *n, bool soft) {
    if (!n) return;
    switch (n->kind) {
    case JN_IF:
        check(c, n->a, true);
        check_list(c, &n->l1, true);
        check_list(c, &n->l2, true);
        return;
    case JN_COND:
        check(c, n->a, true);
        check(c, n->b, true);
        check(c, n->c, true);
        return;
    case JN_FOR:
        check(c, n->b, soft);
        check(c, n->c, false);
        check_list(c, &n->l1, false);
        check_list(c, &n->l2, soft);
        return;
    case JN_SET_BLOCK:
    case JN_FILTER_BLOCK:
        check(c, n->b, false);
        check_list(c, &n->l1, false);
        return;
    case JN_MACRO:
    case JN_CALL_BLOCK:
        for (int k = 0; k < n->l1.n - n->l2.n; k++)
            if (!strcmp(n->l1.v[k]->name, "caller"))
                jmem_fail_at(c->f, EM_ERR_FORMAT, n->l1.v[k]->pos,
                         "syntax error: When defining macros or call blocks the special "
                         "\"caller\" argument must be omitted or be given a default.");
        ((jnode *)n)->uses = scan_list(&n->l3);
        check(c, n->a, soft);
        check_list(c, &n->l2, false);
        check_list(c, &n->l3, false);
        return;
    case JN_WITH:
        check_list(c, &n->l2, soft);
        check_list(c, &n->l3, false);
        return;
    case JN_GENERATION: check_list(c, &n->l3, false); return;
    case JN_FILTER:
    case JN_TEST: check_name(c, n, soft); break;
    default: break;
    }
    check(c, n->a, soft);
    check(c, n->b, soft);
    check(c, n->c, soft);
    check_list(c, &n->l1, soft);
    check_list(c, &n->l2, soft);
    check_list(c, &n->l3, soft);
}

void jinja_check(jfail *f, jnode *root) {
    checker c = {.f = f};
    check_list(&c, &root->l3, false);
}
