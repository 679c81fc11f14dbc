/* `ember bench ops` (filled in with the benchmark work). */
#include <stdio.h>

int bench_ops(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "ember bench ops: not built yet\n");
    return 1;
}
