/* The op table instantiated from op_list.h, with its attribute schemas parsed once. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ember/ops.h" /* em_op_count, em_op_name: exported */
#include "core/op_table.h"
#include "core/rules.h"

static em_op_def table[EM_OP_COUNT] = {
#define EM_X_DEF(id_, name_, kind_, min_in_, max_in_, nout_, schema_, rule_)                       \
    [EM_OP_##id_] = {.id = EM_OP_##id_,                                                            \
                     .name = name_,                                                                \
                     .kind = EM_OPK_##kind_,                                                       \
                     .min_in = min_in_,                                                            \
                     .max_in = max_in_,                                                            \
                     .n_out = nout_,                                                               \
                     .schema = schema_,                                                            \
                     .rule = rule_},
    EM_OP_LIST(EM_X_DEF)
#undef EM_X_DEF
};

static pthread_once_t parse_once = PTHREAD_ONCE_INIT;

static void parse_schemas(void) {
    for (int i = 0; i < EM_OP_COUNT; i++) {
        em_op_def *op = &table[i];
        const char *s = op->schema;
        op->n_attrs = 0;
        while (*s && op->n_attrs < EM_MAX_ATTRS) {
            const char *colon = strchr(s, ':');
            if (!colon) break;
            const char *end = strchr(colon, ',');
            if (!end) end = colon + strlen(colon);
            int k = op->n_attrs++;
            snprintf(op->attr_names[k], sizeof op->attr_names[k], "%.*s", (int)(colon - s), s);
            size_t tl = (size_t)(end - colon - 1);
            const char *t = colon + 1;
            em_attr_type ty = EM_ATTR_INT;
            if (!strncmp(t, "float", tl) && tl == 5) ty = EM_ATTR_FLOAT;
            else if (!strncmp(t, "bool", tl) && tl == 4) ty = EM_ATTR_BOOL;
            else if (!strncmp(t, "ints", tl) && tl == 4) ty = EM_ATTR_INTS;
            else if (!strncmp(t, "dtype", tl) && tl == 5) ty = EM_ATTR_DTYPE;
            op->attr_types[k] = ty;
            s = *end ? end + 1 : end;
        }
    }
}

const em_op_def *em_op_get(em_op_id id) {
    pthread_once(&parse_once, parse_schemas);
    return (unsigned)id < EM_OP_COUNT ? &table[id] : NULL;
}

const em_op_def *em_op_find(const char *name) {
    pthread_once(&parse_once, parse_schemas);
    for (int i = 0; i < EM_OP_COUNT; i++)
        if (!strcmp(table[i].name, name)) return &table[i];
    return NULL;
}

int em_op_attr_index(const em_op_def *op, const char *name) {
    for (int i = 0; i < op->n_attrs; i++)
        if (!strcmp(op->attr_names[i], name)) return i;
    return -1;
}

int em_op_count(void) { return EM_OP_COUNT; }

const char *em_op_name(int i) { return (unsigned)i < EM_OP_COUNT ? table[i].name : NULL; }
