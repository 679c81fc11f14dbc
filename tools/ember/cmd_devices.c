/* `ember devices`: every device Ember can use, with its properties. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ember/ember.h"

/* What installs each kind of PJRT device, for the line `ember devices` prints when one is
 * missing (ember/pjrt.h says where the plugins are looked for). */
static const struct {
    const char *device, *kind, *install;
} kinds[] = {
    {"xla:0", "xla (XLA's CPU runtime)", "pip install xla-cpu-pjrt"},
    {"cuda:0", "cuda (NVIDIA GPUs)", "pip install jax-cuda13-pjrt"},
    {"tpu:0", "tpu (TPUs)", "pip install libtpu"},
};

int cmd_devices(int argc, char **argv) {
    bool json = false, verbose = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: ember devices [--json] [--verbose]\n\n"
                   "Lists the devices Ember can run on: the native CPU backend and every PJRT\n"
                   "device that can be opened (XLA's CPU plugin as xla:N, CUDA as cuda:N, TPU as\n"
                   "tpu:N; see ember/pjrt.h for where plugins are looked for), with platform,\n"
                   "kind, memory, the plugin's versions and its executable cache. A kind that\n"
                   "cannot be opened gets one line with the command that installs its plugin;\n"
                   "--verbose adds why, with every place the plugin was looked for.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--verbose") || !strcmp(argv[i], "-v")) verbose = true;
        else {
            fprintf(stderr, "ember devices: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    /* open every PJRT plugin that can be found; one line for each kind that cannot be */
    em_ctx *c = em_ctx_create();
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        if (!em_device_get(c, kinds[i].device) && !json) {
            /* a plugin that was not found: how to install it (where it was looked for is
             * long, --verbose); one that was found but cannot run here: why */
            const char *why = em_ctx_error(c)->detail;
            if (strstr(why, "tried: ")) {
                printf("(no %s: %s)\n", kinds[i].kind, kinds[i].install);
                if (verbose) printf("    %s\n", why);
            } else {
                const char *named = strstr(why, "': "); /* after "no device named 'tpu:0'" */
                printf("(no %s: %s)\n", kinds[i].kind, named ? named + 3 : why);
            }
        }
        em_ctx_clear_error(c);
    }
    int n = em_device_count();
    for (int i = 0; i < n; i++) {
        em_device_info info;
        if (em_device_info_get(em_device_at(i), &info) != EM_OK) continue;
        if (json) {
            printf("{\"name\": \"%s\", \"platform\": \"%s\", \"kind\": \"%s\", \"memory_bytes\": %lld, "
                   "\"memory_free\": %lld, \"threads\": %d, \"features\": \"%s\"}\n",
                   info.name, info.platform, info.kind, (long long)info.memory_bytes,
                   (long long)info.memory_free, info.threads, info.features);
        } else {
            printf("%-8s platform=%s kind=\"%s\"\n", info.name, info.platform, info.kind);
            printf("         memory %.1f GiB (%.1f GiB free), %d threads\n",
                   info.memory_bytes / 1073741824.0,
                   info.memory_free >= 0 ? info.memory_free / 1073741824.0 : -1.0, info.threads);
            if (info.features[0]) printf("         features: %s\n", info.features);
            em_pjrt_plugin_info pi;
            em_pjrt_cache_stats st;
            if (em_pjrt_plugin_info_get(em_device_at(i), &pi) == EM_OK &&
                em_pjrt_cache_stats_get(em_device_at(i), &st) == EM_OK) {
                printf("         plugin %s (PJRT %d.%d, %s%s%s, StableHLO %s..%s)\n", pi.path,
                       pi.api_major, pi.api_minor, pi.platform,
                       pi.platform_version[0] ? " " : "", pi.platform_version,
                       pi.stablehlo_minimum, pi.stablehlo_current);
                printf("         executables: %lld in memory, %lld compiled, %lld from disk, "
                       "%lld hits\n",
                       (long long)st.entries, (long long)st.compiles, (long long)st.disk_hits,
                       (long long)st.hits);
            }
        }
    }
    em_ctx_free(c);
    return 0;
}
