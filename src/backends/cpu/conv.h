/*
 * Convolution family of the CPU backend (conv2d, upsampling, average pooling): the direct
 * convolution micro-kernels compiled once per instruction set (conv_kern.inc) and the kernels of
 * resample.c and pool.c that conv.c registers.
 */
#ifndef EMBER_CPU_CONV_H
#define EMBER_CPU_CONV_H

#include "backends/cpu/cpu.h"

/*
 * Geometry of one conv2d call as the micro-kernels see it. The input of one image is prepared
 * as f32 [C][hp][sw][wq]: every row zero-padded and split into `sw` phases, phase p holding
 * padded columns p, p + sw, p + 2 sw, ... So for every stride the tap (kh, kw) of output column
 * ow reads phase row (oh*sh + kh*dh, koff[kw]) at element ow: the inner loops run over unit
 * strides.
 */
typedef struct em_conv_geom {
    int64_t cg;           /* input channels per group */
    int64_t kh, kw;       /* kernel size */
    int64_t sh, dh;       /* vertical stride and dilation */
    int64_t hp, sw, wq;   /* prepared input: rows per channel, phases per row, phase length */
    const int64_t *koff;  /* [kw]: (kw*dw % sw) * wq + kw*dw / sw, offset of tap kw in a row */
} em_conv_geom;

/*
 * One output tile: `ocb` output channels x nv*vw columns starting at ow0 of output row oh,
 * summed over the group's cg input channels and every tap, in f32.
 *   x   the group's prepared input, [cg][hp][sw][wq]
 *   w   ocb pointers, each to one output channel's f32 weights [cg][kh][kw] (a block's lanes
 *       past its last channel may repeat that channel: their results are dropped)
 *   dst [ocb][nv*vw]
 * Reads x up to column ow0 + nv*vw - 1 + koff (the caller sizes wq for that).
 */
typedef void (*em_conv_tile_fn)(const em_conv_geom *g, const float *x, const float *const *w,
                                int64_t oh, int64_t ow0, int nv, float *dst);

/* The micro-kernels of one instruction set: `wide` handles `ocb` output channels at once and
 * up to nv_wide vectors of vw floats; `narrow` one channel (depthwise and thin groups) and up
 * to nv_narrow vectors. */
typedef struct em_conv_isa {
    int vw;
    int ocb, nv_wide, nv_narrow;
    em_conv_tile_fn wide, narrow;
} em_conv_isa;

/* Per-ISA fills (t is an em_conv_isa), called only through em_cpu_isa_fill. */
void em_conv_isa_generic(void *t);
void em_conv_isa_avx2(void *t);
void em_conv_isa_avx512(void *t);
const em_conv_isa *em_conv_isa_get(void);
#define EM_CONV_MAX_VW 16
#define EM_CONV_MAX_OCB 8
#define EM_CONV_MAX_NV 8

/* conv2d as an implicit GEMM (conv_gemm.c). em_conv_gemm_takes: whether the call (operands
 * already validated, groups > 0) goes there rather than to the direct kernel: what the GEMM
 * engine can express, the shapes where it measured faster, or EMBER_CONV_ENGINE=direct|gemm. */
bool em_conv_gemm_takes(const em_tensor *x, const em_tensor *w, const em_tensor *bias,
                        const em_tensor *out, int64_t groups);
em_status em_conv_gemm(const em_kernel_args *a);

/* Kernels of resample.c and pool.c. */
em_status em_cpu_upsample_nearest(const em_kernel_args *a);
em_status em_cpu_upsample_bilinear(const em_kernel_args *a);
em_status em_cpu_avg_pool2d(const em_kernel_args *a);

/*
 * Helpers shared by the family: plane p (= n*C + c) of an NCHW tensor of a floating dtype, any
 * strides, read as contiguous f32 [H][W] into buf (or returned directly when the tensor is
 * contiguous f32 already); a contiguous f32 row written to a contiguous tensor of any floating
 * dtype, rounding once.
 */
const float *em_conv_plane_f32(const em_tensor *t, int64_t p, float *buf);
void em_conv_store_row(em_tensor *t, int64_t off, const float *v, int64_t n);

#endif
