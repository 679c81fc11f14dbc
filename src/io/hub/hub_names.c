/* Names that travel from users and servers into file paths and URLs, and the checks that keep
 * them inside the cache: repo ids, repo file names, revisions, etags and commits. */
#include <stdio.h>
#include <string.h>

#include "io/hub/hub_internal.h"

static bool word_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

static bool repo_part(const char *p, size_t n, char *why, size_t why_size, const char *id) {
    if (n < 1 || n > 96) {
        snprintf(why, why_size, "each part of a repo id has 1 to 96 characters: '%s'", id);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if (!word_char(p[i]) && p[i] != '-' && p[i] != '.') {
            snprintf(why, why_size, "a repo id uses letters, digits, '-', '_' and '.': '%s'", id);
            return false;
        }
    if (!word_char(p[0]) || !word_char(p[n - 1])) {
        snprintf(why, why_size, "a repo id part cannot start or end with '-' or '.': '%s'", id);
        return false;
    }
    return true;
}

bool hub_valid_repo_id(const char *id, char *why, size_t why_size) {
    const char *slash = strchr(id, '/');
    if (slash && strchr(slash + 1, '/')) {
        snprintf(why, why_size, "a repo id is 'name' or 'namespace/name': '%s'", id);
        return false;
    }
    if (slash ? !repo_part(id, (size_t)(slash - id), why, why_size, id) ||
                    !repo_part(slash + 1, strlen(slash + 1), why, why_size, id)
              : !repo_part(id, strlen(id), why, why_size, id))
        return false;
    if (strstr(id, "--") || strstr(id, "..")) {
        snprintf(why, why_size, "a repo id cannot contain '--' or '..': '%s'", id);
        return false;
    }
    size_t n = strlen(id);
    if (n >= 4 && !strcmp(id + n - 4, ".git")) {
        snprintf(why, why_size, "a repo id cannot end in '.git': '%s'", id);
        return false;
    }
    return true;
}

bool hub_valid_rel_path(const char *p, char *why, size_t why_size) {
    size_t n = strlen(p);
    if (n == 0 || n > 1024) {
        snprintf(why, why_size, "must have 1 to 1024 characters");
        return false;
    }
    if (p[0] == '/') {
        snprintf(why, why_size, "is an absolute path");
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\\') {
            snprintf(why, why_size, "contains a backslash");
            return false;
        }
        if (ch < 0x20 || ch == 0x7f) {
            snprintf(why, why_size, "contains a control character");
            return false;
        }
    }
    /* segment by segment: no "", ".", ".." and no Windows drive ("C:"), as huggingface_hub's
     * _validate_relative_filename (a name made on Linux must not escape on Windows either) */
    for (const char *s = p;;) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == 0 || (len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.')) {
            snprintf(why, why_size, "has an empty, '.' or '..' path segment");
            return false;
        }
        if (len >= 2 && s[1] == ':' && ((s[0] | 0x20) >= 'a' && (s[0] | 0x20) <= 'z')) {
            snprintf(why, why_size, "starts a path segment with a drive letter");
            return false;
        }
        if (!e) break;
        s = e + 1;
    }
    return true;
}

bool hub_valid_segment(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 128 || s[0] == '.') return false;
    for (size_t i = 0; i < n; i++)
        if (!word_char(s[i]) && s[i] != '-' && s[i] != '.') return false;
    return true;
}

static bool lower_hex(const char *s, size_t n) {
    if (strlen(s) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

bool hub_is_commit(const char *s) { return lower_hex(s, 40); }
bool hub_is_sha256(const char *s) { return lower_hex(s, 64); }

bool hub_quote(char *buf, size_t size, const char *s, bool keep_slash) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = strlen(buf);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        /* Python's quote never escapes A-Za-z0-9 and "_.-~" */
        bool plain = word_char((char)*p) || *p == '.' || *p == '-' || *p == '~' ||
                     (keep_slash && *p == '/');
        if (o + (plain ? 1 : 3) + 1 > size) return false;
        if (plain) {
            buf[o++] = (char)*p;
        } else {
            buf[o++] = '%';
            buf[o++] = hex[*p >> 4];
            buf[o++] = hex[*p & 15];
        }
    }
    buf[o] = '\0';
    return true;
}
