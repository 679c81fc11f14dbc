/* `ember devices`: every device Ember can use, with its properties. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ember/ember.h"

int cmd_devices(int argc, char **argv) {
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: ember devices [--json]\n\n"
                   "Lists the devices Ember can run on: the native CPU backend and every PJRT\n"
                   "device that can be opened (XLA's CPU plugin as xla:N, CUDA as cuda:N, TPU as\n"
                   "tpu:N; see ember/pjrt.h for where plugins are looked for), with platform,\n"
                   "kind, memory, the plugin's versions and its executable cache.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--json")) json = true;
        else {
            fprintf(stderr, "ember devices: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    /* open every PJRT plugin that can be found; say where the others were looked for */
    em_ctx *c = em_ctx_create();
    const char *names[3] = {"xla:0", "cuda:0", "tpu:0"};
    for (int i = 0; i < 3; i++) {
        if (!em_device_get(c, names[i]) && !json)
            printf("(%.*s: %s)\n", (int)(strchr(names[i], ':') - names[i]), names[i],
                   em_ctx_error(c)->detail);
        em_ctx_clear_error(c);
    }
    int n = em_device_count();
    for (int i = 0; i < n; i++) {
        em_device_info info;
        if (em_device_query(em_device_at(i), &info) != EM_OK) continue;
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
    em_ctx_destroy(c);
    return 0;
}
