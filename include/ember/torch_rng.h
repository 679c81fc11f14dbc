/*
 * ember/torch_rng.h — torch's CPU random generator, draw for draw.
 *
 * diffusers seeds a pipeline with `generator=torch.Generator("cpu").manual_seed(S)` and draws
 * the initial latents, then the per-step noise of DDPM, DDIM (eta > 0) and Euler ancestral,
 * with `torch.randn(shape, generator=g)` on the host. An em_torch_generator reproduces those
 * draws bit for bit, so `--seed S` gives the image diffusers gives:
 *
 *     em_torch_generator *g = em_torch_generator_create(42);
 *     em_tensor *latents = em_torch_randn(c, g, EM_SHAPE(1, 4, 64, 64), dev);  // on dev
 *     ...                                 // the schedulers draw their noise from g too
 *     em_torch_generator_free(g);
 *
 * What torch computes: a Mersenne Twister (MT19937, seeded as std::mt19937 with the low 32 bits
 * of the seed). torch.randn of fewer than 16 float32 values takes its scalar path: each value is
 * a double-precision Box-Muller pair from two 53-bit uniforms, the second value of the pair kept
 * in the generator for the next call. From 16 values it takes its vectorised path: one 24-bit
 * uniform per value, then Box-Muller over blocks of 16 (the first 8 values give the radii, the
 * next 8 the angles); when the size is not a multiple of 16 the last 16 values are drawn again
 * and recomputed. That vectorised path exists in two variants whose values differ in the last
 * bits: torch's AVX2 kernels (x86-64 CPUs with AVX2 but without AVX-512: polynomial log and
 * sincos in float) and its portable kernels (CPUs with AVX-512, ARM, or ATEN_CPU_CAPABILITY=
 * default: the C library's logf/sinf/cosf). Which one torch ran is torch's
 * `torch.backends.cpu.get_cpu_capability()`; em_torch_generator_set_kind picks ours.
 *
 * Ember's own em_randn stays the fast generator for everything else.
 */
#ifndef EMBER_TORCH_RNG_H
#define EMBER_TORCH_RNG_H

#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_torch_generator em_torch_generator;

/** Which of torch's vectorised normal kernels to reproduce (sizes >= 16). Append-only. */
typedef enum em_torch_rng_kind {
    EM_TORCH_RNG_AVX2 = 0,    /* torch with capability "AVX2" (the default here) */
    EM_TORCH_RNG_DEFAULT = 1, /* torch with capability "DEFAULT" or "AVX512", and on ARM */
    EM_TORCH_RNG_KIND_COUNT = 2
} em_torch_rng_kind;

/** A generator in the state of torch.Generator("cpu").manual_seed(seed), kind AVX2 (or the
 *  kind EMBER_TORCH_RNG names: "avx2" or "default"). NULL only when out of memory. Free with
 *  em_torch_generator_free. */
EM_API em_torch_generator *em_torch_generator_create(uint64_t seed);
/**
 * A list of n generators, diffusers' generator=[torch.Generator("cpu").manual_seed(s) for s in
 * seeds] (one per image): em_torch_randn draws row i (index i of the first dimension) from
 * generator i, for a first dimension of at most n rows (diffusers encodes a single init image
 * with generator 0 alone); em_torch_randn_fill splits n values evenly over the generators (an
 * uneven n is EM_ERR_INVALID_ARG); em_torch_generator_random draws from the first. Reseeding and
 * set_kind apply to every one. NULL for no seeds, n < 1 or out of memory. Free with
 * em_torch_generator_free.
 */
EM_API em_torch_generator *em_torch_generator_create_list(const uint64_t *seeds, int n);
/** How many generators g holds: n for a list, 1 otherwise (0 for NULL). */
EM_API int em_torch_generator_count(const em_torch_generator *g);
/** NULL is a no-op. */
EM_API void em_torch_generator_free(em_torch_generator *g);
/** Reseeds, as manual_seed: the state and the cached normal value are reset. */
EM_API void em_torch_generator_manual_seed(em_torch_generator *g, uint64_t seed);
/** The seed last given. */
EM_API uint64_t em_torch_generator_initial_seed(const em_torch_generator *g);
EM_API void em_torch_generator_set_kind(em_torch_generator *g, em_torch_rng_kind kind);
EM_API em_torch_rng_kind em_torch_generator_kind(const em_torch_generator *g);
/** Parses "avx2" or "default". */
EM_API bool em_torch_rng_kind_parse(const char *s, em_torch_rng_kind *out);

/** The next 32-bit output of the Mersenne Twister (torch's generator.random()). */
EM_API uint32_t em_torch_generator_random(em_torch_generator *g);

/**
 * Fills out[0..n) as torch.randn(n, generator=g) (float32) does and advances g the same way;
 * a shape's values are its numel in row-major order, so randn((1,4,8,8)) is n = 256.
 * Returns EM_ERR_INVALID_ARG for a NULL argument or n < 0 (g unchanged).
 */
EM_API em_status em_torch_randn_fill(em_torch_generator *g, float *out, int64_t n);

/**
 * torch.randn(shape, generator=g) as an f32 tensor on `dev` (NULL: the context's device): drawn
 * on the host, then copied, as diffusers recommends. NULL with the error in c.
 */
#define em_torch_randn(c, ...) em_torch_randn_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_torch_randn_(em_ctx *c, const char *file, int line, em_torch_generator *g,
                                  int ndim, const int64_t *shape, em_device *dev);

#ifdef __cplusplus
}
#endif
#endif
