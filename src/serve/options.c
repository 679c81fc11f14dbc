/* The server's default options (built with or without the HTTP layer). */
#include <string.h>

#include "ember/server.h"

em_server_options em_server_default_options(void) {
    em_server_options o;
    memset(&o, 0, sizeof o);
    o.host = "127.0.0.1";
    o.port = 8080;
    o.max_batch = 8;
    o.parallel = 64;
    o.max_body_bytes = (size_t)1 << 20;
    o.prefill_chunk = 64;
    o.prefix_cache = 4;
    o.kv_block = 16;
    return o;
}
