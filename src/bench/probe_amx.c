/* The AMX bf16 peak probe (see probe.h): independent tdpbf16ps chains on four accumulator tiles.
 * Built with the AMX flags; reached only where em_cpu_amx(). */
#include <immintrin.h>
#include <stdint.h>

#include "backends/cpu/amx_config.h"
#include "backends/cpu/cpu.h"
#include "bench/probe.h"

double em_probe_amx_bf16(int64_t iters) {
    _Alignas(64) static const uint16_t ones[16 * 32] = {0};
    _tile_loadconfig(&em_amx_config_16x64);
    _tile_loadd(4, ones, 64);
    _tile_loadd(5, ones, 64);
    _tile_loadd(6, ones, 64);
    _tile_loadd(7, ones, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _Alignas(64) float sink[16 * 16];
    _tile_stored(0, sink, 64);
    _tile_release();
    volatile float s = sink[0];
    (void)s;
    /* each tdpbf16ps: 16 x 16 outputs of 32 products */
    return (double)iters * 4 * 16 * 16 * 32 * 2;
}
