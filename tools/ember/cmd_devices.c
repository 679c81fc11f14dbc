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
                   "device that can be opened, with platform, kind, memory and features.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--json")) json = true;
        else {
            fprintf(stderr, "ember devices: unknown option '%s'\n", argv[i]);
            return 2;
        }
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
        }
    }
    return 0;
}
