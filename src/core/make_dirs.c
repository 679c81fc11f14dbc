/* mkdir -p (see make_dirs.h). */
#include "core/make_dirs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/tensor_impl.h"

em_status em_make_dirs(em_ctx *c, const char *op, const char *dir) {
    if (!dir || !*dir) return EM_FAIL(c, EM_ERR_INVALID_ARG, op, "empty folder name");
    char *p = strdup(dir);
    if (!p) return EM_FAIL(c, EM_ERR_OOM, op, "out of memory");
    em_status st = EM_OK;
    /* each prefix ending at a '/' (the root skipped), then the whole path */
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        char keep = *s;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            st = EM_FAIL(c, EM_ERR_IO, op, "cannot create the folder %s: %s", p, strerror(errno));
            break;
        }
        if (!keep) break;
        *s = keep;
    }
    free(p);
    struct stat sb; /* mkdir says EEXIST for a file of that name too */
    if (st == EM_OK && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        st = EM_FAIL(c, EM_ERR_IO, op, "%s exists and is not a folder", dir);
    return st;
}
