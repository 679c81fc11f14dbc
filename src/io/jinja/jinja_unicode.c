/* Chat templates: Unicode with Python's definitions. utf8proc gives the simple case mappings;
 * the generated tables (scripts/gen_jinja_unicode.py) add what Python 3.11 does differently. */
#include <string.h>
#include <utf8proc.h>

#include "io/jinja/jinja.h"

typedef struct ju_special {
    uint32_t cp;
    const char *utf8;
} ju_special;
typedef struct ju_range {
    uint32_t lo, hi;
} ju_range;

#include "io/jinja/jinja_unicode.inc"

#define JU_COUNT(t) (sizeof(t) / sizeof((t)[0]))

static bool in_ranges(const ju_range *r, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

static const char *special(const ju_special *t, size_t n, uint32_t cp) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < t[mid].cp)
            hi = mid;
        else if (cp > t[mid].cp)
            lo = mid + 1;
        else
            return t[mid].utf8;
    }
    return NULL;
}

uint32_t ju_decode(const char *s, size_t n, size_t *i) {
    const unsigned char *p = (const unsigned char *)s + *i;
    size_t left = n - *i;
    uint32_t c = p[0];
    if (c < 0x80) {
        *i += 1;
        return c;
    }
    size_t k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (k == 0 || k > left) {
        *i += 1;
        return 0xFFFD;
    }
    uint32_t cp = c & (0x3F >> (k - 1));
    for (size_t j = 1; j < k; j++) {
        if ((p[j] & 0xC0) != 0x80) {
            *i += 1;
            return 0xFFFD;
        }
        cp = (cp << 6) | (p[j] & 0x3F);
    }
    *i += k;
    return cp;
}

size_t ju_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
    return c;
}

size_t ju_offset(const char *s, size_t n, size_t cp) {
    size_t i = 0, c = 0;
    while (i < n) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (c == cp) return i;
            c++;
        }
        i++;
    }
    return n;
}

bool ju_isspace(uint32_t cp) { return in_ranges(ju_space, JU_COUNT(ju_space), cp); }
bool ju_isprintable(uint32_t cp) {
    return !in_ranges(ju_nonprintable, JU_COUNT(ju_nonprintable), cp);
}
bool ju_iscased(uint32_t cp) { return in_ranges(ju_cased, JU_COUNT(ju_cased), cp); }
bool ju_islower(uint32_t cp) { return in_ranges(ju_lowercase, JU_COUNT(ju_lowercase), cp); }
bool ju_isupper(uint32_t cp) { return in_ranges(ju_uppercase, JU_COUNT(ju_uppercase), cp); }
bool ju_isalpha(uint32_t cp) { return in_ranges(ju_alpha, JU_COUNT(ju_alpha), cp); }
bool ju_isalnum(uint32_t cp) {
    return ju_isalpha(cp) || in_ranges(ju_numeric, JU_COUNT(ju_numeric), cp) ||
           in_ranges(ju_digit, JU_COUNT(ju_digit), cp) ||
           in_ranges(ju_decimal, JU_COUNT(ju_decimal), cp);
}
bool ju_isdigit_ascii(uint32_t cp) { return cp >= '0' && cp <= '9'; }

bool ju_class(const char *which, uint32_t cp) {
    if (!strcmp(which, "decimal")) return in_ranges(ju_decimal, JU_COUNT(ju_decimal), cp);
    if (!strcmp(which, "digit")) return in_ranges(ju_digit, JU_COUNT(ju_digit), cp);
    if (!strcmp(which, "numeric")) return in_ranges(ju_numeric, JU_COUNT(ju_numeric), cp);
    if (!strcmp(which, "title")) return in_ranges(ju_titlecase, JU_COUNT(ju_titlecase), cp);
    return false;
}

static bool case_ignorable(uint32_t cp) {
    return in_ranges(ju_case_ignorable, JU_COUNT(ju_case_ignorable), cp);
}

void ju_put_upper(jbuf *b, uint32_t cp) {
    const char *s = special(ju_upper_special, JU_COUNT(ju_upper_special), cp);
    if (s)
        jmem_puts(b, s);
    else
        jmem_put_cp(b, (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp));
}

void ju_put_lower(jbuf *b, uint32_t cp) {
    const char *s = special(ju_lower_special, JU_COUNT(ju_lower_special), cp);
    if (s)
        jmem_puts(b, s);
    else
        jmem_put_cp(b, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
}

void ju_put_title(jbuf *b, uint32_t cp) {
    const char *s = special(ju_title_special, JU_COUNT(ju_title_special), cp);
    if (s)
        jmem_puts(b, s);
    else
        jmem_put_cp(b, (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp));
}

/* CPython's final-sigma rule (unicodeobject.c handle_capital_sigma): a capital sigma becomes
 * final when a cased letter precedes it and none follows, skipping case-ignorable ones. */
static bool final_sigma(const char *s, size_t n, size_t start, size_t end) {
    size_t j = start;
    bool before = false;
    while (j > 0) {
        size_t k = j - 1;
        while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        size_t t = k;
        uint32_t c = ju_decode(s, n, &t);
        j = k;
        if (case_ignorable(c)) continue;
        before = ju_iscased(c);
        break;
    }
    if (!before) return false;
    size_t i = end;
    while (i < n) {
        uint32_t c = ju_decode(s, n, &i);
        if (case_ignorable(c)) continue;
        return !ju_iscased(c);
    }
    return true;
}

void ju_put_lower_at(jbuf *b, const char *s, size_t n, size_t start, size_t end, uint32_t cp) {
    if (cp == 0x3A3 && final_sigma(s, n, start, end))
        jmem_put_cp(b, 0x3C2);
    else
        ju_put_lower(b, cp);
}

void ju_lower_str(jbuf *b, const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        uint32_t cp = ju_decode(s, n, &i);
        ju_put_lower_at(b, s, n, start, i, cp);
    }
}
