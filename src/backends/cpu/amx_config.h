/*
 * The AMX tile configuration Ember's tile code loads (gemm_amx.c, and the peak probe of
 * src/bench/probe_amx.c): palette 1, tiles 0-7 of 16 rows of 64 bytes each. Include only from
 * files built with the AMX flags.
 */
#ifndef EMBER_AMX_CONFIG_H
#define EMBER_AMX_CONFIG_H

#include <stdint.h>

typedef struct em_amx_config {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) em_amx_config;

/* A constant: GCC 12 does not treat ldtilecfg as reading its operand, and dropped the stores
 * that filled a configuration on the stack (the first tile instruction then raised SIGILL). */
static const em_amx_config em_amx_config_16x64 = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

#endif
