/* em_server_* in a build without libmicrohttpd: every server fails to be created, saying why. */
#include "ember/server.h"

em_server *em_server_create(em_ctx *c, const em_server_options *o) {
    (void)o;
    if (c && !em_ctx_status(c))
        em_ctx_fail(c, EM_ERR_UNSUPPORTED, "server_create",
                    "this build of Ember has no HTTP server: libmicrohttpd was not found when it "
                    "was configured (install libmicrohttpd-dev, see scripts/deps.sh, and rebuild)");
    return NULL;
}

em_status em_server_start(em_ctx *c, em_server *s) {
    (void)s;
    return c ? em_ctx_fail(c, EM_ERR_UNSUPPORTED, "server_start", "no HTTP server in this build")
             : EM_ERR_UNSUPPORTED;
}

em_status em_server_wait_ready(em_ctx *c, em_server *s) {
    (void)s;
    return c ? em_ctx_fail(c, EM_ERR_UNSUPPORTED, "server_wait_ready",
                           "no HTTP server in this build")
             : EM_ERR_UNSUPPORTED;
}

int em_server_port(const em_server *s) {
    (void)s;
    return 0;
}

int em_server_stop(em_server *s, double drain_s) {
    (void)s, (void)drain_s;
    return 0;
}

void em_server_free(em_server *s) { (void)s; }
