/*
 * ember/ops.h — the eager tensor operations.
 *
 * Every op validates its arguments and infers its result when it is called: a wrong shape is
 * reported at the calling line with the op's name, the input signatures and the device. On
 * failure an op returns NULL and records the error in the context (core.h); given a NULL input
 * or a context that already holds an error it returns NULL and records nothing. Results belong
 * to the context's innermost scope.
 *
 * Each `em_x(c, ...)` is a macro for `em_x_(c, __FILE__, __LINE__, ...)`.
 *
 * Conventions: dims may be negative (counted from the end). Element-wise ops broadcast like
 * NumPy and promote dtypes like torch (a 0-d tensor counts less than a dimensioned one of the
 * same category: bf16 tensor * f32 scalar stays bf16). Integer inputs to floating functions
 * (exp, div, ...) give f32. Index tensors are i64 or i32.
 */
#ifndef EMBER_OPS_H
#define EMBER_OPS_H

#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define EM_OP_ARGS em_ctx *c, const char *file, int line

/* ---- creation (on the context's default device) ---- */
#define em_empty(c, ...) em_empty_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_empty_(EM_OP_ARGS, em_dtype dtype, int ndim, const int64_t *shape);
#define em_zeros(c, ...) em_zeros_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_zeros_(EM_OP_ARGS, em_dtype dtype, int ndim, const int64_t *shape);
#define em_ones(c, ...) em_ones_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_ones_(EM_OP_ARGS, em_dtype dtype, int ndim, const int64_t *shape);
#define em_full(c, ...) em_full_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_full_(EM_OP_ARGS, em_dtype dtype, int ndim, const int64_t *shape,
                           double value);
/** Values start, start+step, ... < end (step may be negative, not 0), like torch.arange. */
#define em_arange(c, ...) em_arange_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_arange_(EM_OP_ARGS, double start, double end, double step, em_dtype dtype);
/** n x m identity. */
#define em_eye(c, ...) em_eye_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_eye_(EM_OP_ARGS, int64_t n, int64_t m, em_dtype dtype);
/** Uniform in [low, high), reproducible for a seed (independent of the thread count). */
#define em_rand(c, ...) em_rand_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_rand_(EM_OP_ARGS, em_dtype dtype, int ndim, const int64_t *shape,
                           uint64_t seed, double low, double high);
/** Normal(mean, std), reproducible for a seed. */
#define em_randn(c, ...) em_randn_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_randn_(EM_OP_ARGS, em_dtype dtype, int ndim, const int64_t *shape,
                            uint64_t seed, double mean, double std);

/* ---- views (share storage) and layout ---- */
/** A view when the strides allow it, else a contiguous copy. One dim may be -1. */
#define em_reshape(c, ...) em_reshape_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_reshape_(EM_OP_ARGS, em_tensor *x, int ndim, const int64_t *shape);
/** Like reshape but an error when no view is possible. */
#define em_view(c, ...) em_view_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_view_(EM_OP_ARGS, em_tensor *x, int ndim, const int64_t *shape);
#define em_permute(c, ...) em_permute_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_permute_(EM_OP_ARGS, em_tensor *x, int ndim, const int *dims);
#define em_transpose(c, ...) em_transpose_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_transpose_(EM_OP_ARGS, em_tensor *x, int dim0, int dim1);
/** Python slicing x[start:end:step] along dim (indices clamped, negative counted from the end;
 *  step >= 1). */
#define em_slice(c, ...) em_slice_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_slice_(EM_OP_ARGS, em_tensor *x, int dim, int64_t start, int64_t end,
                            int64_t step);
/** torch.narrow: `length` elements from `start`; out of range is an error. */
#define em_narrow(c, ...) em_narrow_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_narrow_(EM_OP_ARGS, em_tensor *x, int dim, int64_t start, int64_t length);
/** Broadcasts size-1 dims (and new leading dims) to `shape`; -1 keeps a size. */
#define em_expand(c, ...) em_expand_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_expand_(EM_OP_ARGS, em_tensor *x, int ndim, const int64_t *shape);
/** Removes dim (which must have size 1... or is left alone if not, as torch does). */
#define em_squeeze(c, ...) em_squeeze_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_squeeze_(EM_OP_ARGS, em_tensor *x, int dim);
#define em_squeeze_all(c, ...) em_squeeze_all_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_squeeze_all_(EM_OP_ARGS, em_tensor *x);
#define em_unsqueeze(c, ...) em_unsqueeze_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_unsqueeze_(EM_OP_ARGS, em_tensor *x, int dim);
/**
 * torch.split(x, split_size, dim): views of `split_size` elements (the last may be shorter).
 * Writes up to max_out tensors to out; returns how many (or -1 on error).
 */
#define em_split(c, ...) em_split_((c), EM_HERE, __VA_ARGS__)
EM_API int em_split_(EM_OP_ARGS, em_tensor *x, int64_t split_size, int dim, em_tensor **out,
                     int max_out);
/** torch.split(x, [sizes], dim): sizes must sum to the dim's size. out holds n tensors. */
#define em_split_sizes(c, ...) em_split_sizes_((c), EM_HERE, __VA_ARGS__)
EM_API int em_split_sizes_(EM_OP_ARGS, em_tensor *x, const int64_t *sizes, int n, int dim,
                           em_tensor **out);
/** A contiguous tensor with x's values (x itself, with a new reference, if already contiguous). */
#define em_contiguous(c, ...) em_contiguous_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_contiguous_(EM_OP_ARGS, em_tensor *x);
/**
 * Writes src (broadcast to dst's shape, cast to dst's dtype) into dst's memory, in place. dst may
 * be a strided view (a slice of a KV cache, say) but not an expanded one. Returns the status.
 */
#define em_assign(c, ...) em_assign_((c), EM_HERE, __VA_ARGS__)
EM_API em_status em_assign_(EM_OP_ARGS, em_tensor *dst, em_tensor *src);
/** Copy to another device (x itself if already there). */
#define em_to(c, ...) em_to_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_to_(EM_OP_ARGS, em_tensor *x, em_device *dev);

/* ---- element-wise ---- */
#define em_cast(c, ...) em_cast_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_cast_(EM_OP_ARGS, em_tensor *x, em_dtype dtype);
#define em_neg(c, ...) em_neg_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_neg_(EM_OP_ARGS, em_tensor *x);
#define em_abs(c, ...) em_abs_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_abs_(EM_OP_ARGS, em_tensor *x);
#define em_exp(c, ...) em_exp_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_exp_(EM_OP_ARGS, em_tensor *x);
#define em_log(c, ...) em_log_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_log_(EM_OP_ARGS, em_tensor *x);
#define em_sqrt(c, ...) em_sqrt_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_sqrt_(EM_OP_ARGS, em_tensor *x);
#define em_rsqrt(c, ...) em_rsqrt_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_rsqrt_(EM_OP_ARGS, em_tensor *x);
#define em_sin(c, ...) em_sin_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_sin_(EM_OP_ARGS, em_tensor *x);
#define em_cos(c, ...) em_cos_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_cos_(EM_OP_ARGS, em_tensor *x);
#define em_tanh(c, ...) em_tanh_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_tanh_(EM_OP_ARGS, em_tensor *x);
#define em_sigmoid(c, ...) em_sigmoid_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_sigmoid_(EM_OP_ARGS, em_tensor *x);
#define em_silu(c, ...) em_silu_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_silu_(EM_OP_ARGS, em_tensor *x);
/** GELU; approximate_tanh selects torch's approximate="tanh" form (else the erf form). */
#define em_gelu(c, ...) em_gelu_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_gelu_(EM_OP_ARGS, em_tensor *x, bool approximate_tanh);
#define em_relu(c, ...) em_relu_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_relu_(EM_OP_ARGS, em_tensor *x);
/** Clamp to [lo, hi]; pass NAN for a bound that is absent. */
#define em_clamp(c, ...) em_clamp_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_clamp_(EM_OP_ARGS, em_tensor *x, double lo, double hi);
#define em_logical_not(c, ...) em_logical_not_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_logical_not_(EM_OP_ARGS, em_tensor *x);

#define em_add(c, ...) em_add_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_add_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
#define em_sub(c, ...) em_sub_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_sub_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
#define em_mul(c, ...) em_mul_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_mul_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
/** True division (integers give f32). */
#define em_div(c, ...) em_div_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_div_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
#define em_pow(c, ...) em_pow_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_pow_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
#define em_maximum(c, ...) em_maximum_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_maximum_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
#define em_minimum(c, ...) em_minimum_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_minimum_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
#define em_eq(c, ...) em_eq_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_eq_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
#define em_ne(c, ...) em_ne_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_ne_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
#define em_lt(c, ...) em_lt_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_lt_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
#define em_le(c, ...) em_le_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_le_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
#define em_gt(c, ...) em_gt_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_gt_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
#define em_ge(c, ...) em_ge_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_ge_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
#define em_logical_and(c, ...) em_logical_and_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_logical_and_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
#define em_logical_or(c, ...) em_logical_or_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_logical_or_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
/** cond ? a : b, broadcasting all three; cond must be bool. */
#define em_where(c, ...) em_where_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_where_(EM_OP_ARGS, em_tensor *cond, em_tensor *a, em_tensor *b);
/* with a Python-scalar right-hand side (a 0-d tensor of x's dtype category) */
#define em_add_scalar(c, ...) em_add_scalar_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_add_scalar_(EM_OP_ARGS, em_tensor *x, double v);
#define em_mul_scalar(c, ...) em_mul_scalar_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_mul_scalar_(EM_OP_ARGS, em_tensor *x, double v);
#define em_div_scalar(c, ...) em_div_scalar_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_div_scalar_(EM_OP_ARGS, em_tensor *x, double v);
#define em_pow_scalar(c, ...) em_pow_scalar_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_pow_scalar_(EM_OP_ARGS, em_tensor *x, double v);

/* ---- reductions: dims == NULL or ndims == 0 reduces over every dim ---- */
#define em_sum(c, ...) em_sum_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_sum_(EM_OP_ARGS, em_tensor *x, const int *dims, int ndims, bool keepdim);
#define em_mean(c, ...) em_mean_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_mean_(EM_OP_ARGS, em_tensor *x, const int *dims, int ndims, bool keepdim);
/** Largest value (NaN propagates), like torch.amax. */
#define em_max(c, ...) em_max_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_max_(EM_OP_ARGS, em_tensor *x, const int *dims, int ndims, bool keepdim);
#define em_min(c, ...) em_min_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_min_(EM_OP_ARGS, em_tensor *x, const int *dims, int ndims, bool keepdim);
#define em_prod(c, ...) em_prod_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_prod_(EM_OP_ARGS, em_tensor *x, const int *dims, int ndims, bool keepdim);
/** Variance with Bessel's correction `correction` (torch's default is 1). */
#define em_var(c, ...) em_var_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_var_(EM_OP_ARGS, em_tensor *x, const int *dims, int ndims, int correction,
                          bool keepdim);
/** Index (i64) of the first largest value along dim. */
#define em_argmax(c, ...) em_argmax_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_argmax_(EM_OP_ARGS, em_tensor *x, int dim, bool keepdim);
#define em_argmin(c, ...) em_argmin_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_argmin_(EM_OP_ARGS, em_tensor *x, int dim, bool keepdim);
/** Index into the flattened tensor (torch.argmax without dim). */
#define em_argmax_all(c, ...) em_argmax_all_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_argmax_all_(EM_OP_ARGS, em_tensor *x);
#define em_argmin_all(c, ...) em_argmin_all_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_argmin_all_(EM_OP_ARGS, em_tensor *x);
#define em_softmax(c, ...) em_softmax_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_softmax_(EM_OP_ARGS, em_tensor *x, int dim);
#define em_log_softmax(c, ...) em_log_softmax_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_log_softmax_(EM_OP_ARGS, em_tensor *x, int dim);
/** Running sum along dim (integer inputs give i64, as torch). */
#define em_cumsum(c, ...) em_cumsum_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_cumsum_(EM_OP_ARGS, em_tensor *x, int dim);

/* ---- linear algebra ---- */
/**
 * torch.matmul for 1-D to 4-D operands with batch broadcasting; f32, bf16, f16 (bf16/f16
 * accumulate in f32 and round once, as torch's CPU matmul), both operands of the same dtype.
 * Operands may be any strided views. An inner size of 0 gives zeros. Errors: EM_ERR_SHAPE
 * naming both shapes (inner sizes differ, batch dims do not broadcast, more than 4 dims),
 * EM_ERR_DTYPE (not f32/bf16/f16, or two dtypes).
 */
#define em_matmul(c, ...) em_matmul_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_matmul_(EM_OP_ARGS, em_tensor *a, em_tensor *b);
/**
 * x[..., in] @ w[out, in]^T + bias[out] (bias may be NULL): the Hub's nn.Linear layout. bf16/f16
 * sum in f32, bias included, and round once (as torch). x, w and bias share one dtype.
 */
#define em_linear(c, ...) em_linear_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_linear_(EM_OP_ARGS, em_tensor *x, em_tensor *w, em_tensor *bias);

/* ---- normalisation (statistics in f32 whatever the dtype) ---- */
/**
 * RMSNorm over the last dim. unit_offset = false: Llama/Qwen (x * rsqrt(mean(x^2) + eps)
 * rounded to x's dtype, times weight); true: Gemma (times (1 + weight), in f32). weight may be
 * NULL. The result has x's dtype (with a weight of another dtype torch would promote; Ember
 * rounds that result to x's dtype).
 */
#define em_rms_norm(c, ...) em_rms_norm_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_rms_norm_(EM_OP_ARGS, em_tensor *x, em_tensor *weight, double eps,
                               bool unit_offset);
/** LayerNorm over the last dim (F.layer_norm, biased variance); weight and bias may be NULL. */
#define em_layer_norm(c, ...) em_layer_norm_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_layer_norm_(EM_OP_ARGS, em_tensor *x, em_tensor *weight, em_tensor *bias,
                                 double eps);
/** GroupNorm of x[N, C, *] with `groups` groups; weight[C] and bias[C] may be NULL. */
#define em_group_norm(c, ...) em_group_norm_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_group_norm_(EM_OP_ARGS, em_tensor *x, int64_t groups, em_tensor *weight,
                                 em_tensor *bias, double eps);

/* ---- transformer ---- */

/** rope_scaling of config.json. */
typedef enum em_rope_type {
    EM_ROPE_DEFAULT = 0,
    EM_ROPE_LINEAR = 1,
    EM_ROPE_DYNAMIC = 2,
    EM_ROPE_LLAMA3 = 3,
    EM_ROPE_YARN = 4,
    EM_ROPE_PROPORTIONAL = 5 /* Gemma 4: head_dim / 2 frequencies, the unrotated ones 0 */
} em_rope_type;

typedef struct em_rope_config {
    em_rope_type type;
    double theta;                  /* rope_theta */
    int64_t head_dim;              /* attention head size */
    double partial_rotary_factor;  /* fraction of head_dim that rotates (1.0: all) */
    double factor;                 /* linear, dynamic, llama3, yarn, proportional */
    int64_t max_position_embeddings;
    int64_t original_max_position_embeddings; /* llama3, yarn (0: use max_position_embeddings) */
    double low_freq_factor, high_freq_factor; /* llama3 */
    double beta_fast, beta_slow;              /* yarn (defaults 32, 1) */
    double attention_factor;                  /* yarn (0: derived from factor) */
    double mscale, mscale_all_dim;            /* yarn (0: unused) */
    bool truncate;                            /* yarn (default true) */
} em_rope_config;

/** Defaults: default type, theta 10000, factor 1, beta_fast 32, beta_slow 1, truncate. */
EM_API em_rope_config em_rope_config_default(void);
/**
 * The inverse frequencies (rotary_dim / 2 of them, rotary_dim = int(head_dim *
 * partial_rotary_factor), which must be even) and the attention scaling that transformers' rope
 * initialisation computes for `cfg` (modeling_rope_utils.py), in the same f32 arithmetic.
 * `seq_len` matters for the dynamic type only: the longest position seen + 1; up to
 * max_position_embeddings it gives the initial frequencies, beyond it those the model's forward
 * recomputes. The proportional type (Gemma 4) always gives head_dim / 2 frequencies: the first
 * int(partial_rotary_factor * head_dim // 2) as the default type computes them over head_dim,
 * the rest 0 (those dims pass through em_rope unrotated), all divided by factor; its
 * partial_rotary_factor may be 0. attention_scaling may be NULL. Returns the number of frequencies written
 * (<= max_n) or -1 with an error in the context (invalid or incomplete config, max_n too small).
 */
EM_API int em_rope_inv_freq(em_ctx *c, const em_rope_config *cfg, int64_t seq_len,
                            float *inv_freq, int max_n, float *attention_scaling);
/**
 * cos and sin tables [..., T, rotary_dim] (positions [..., T] i64; inv_freq [rotary_dim/2] f32),
 * computed in f32 as transformers does, times `scaling`, cast to `dtype`. Returns cos and writes
 * sin to *sin_out.
 */
#define em_rope_cos_sin(c, ...) em_rope_cos_sin_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_rope_cos_sin_(EM_OP_ARGS, em_tensor *positions, em_tensor *inv_freq,
                                   double scaling, em_dtype dtype, em_tensor **sin_out);
/**
 * Rotary embedding with the rotate-half convention: x[B, H, T, D] with cos/sin [B or 1, T, R]
 * (R <= D, even); the first R dims rotate, the rest pass through. Rounded as torch computes
 * q * cos + rotate_half(q) * sin (each product and the sum in the promoted dtype of x and cos);
 * the result has x's dtype.
 */
#define em_rope(c, ...) em_rope_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_rope_(EM_OP_ARGS, em_tensor *x, em_tensor *cos, em_tensor *sin);

typedef struct em_sdpa_params {
    double scale;   /* 0: 1/sqrt(head_dim) */
    bool causal;    /* query i sees keys <= i + (Tk - Tq) */
    int64_t window; /* sliding window: query i sees keys > i + (Tk - Tq) - window (so `window`
                       keys with causal, as transformers' sliding_window); 0: none */
    double softcap; /* logits = softcap * tanh(logits / softcap), before the mask; 0: none */
} em_sdpa_params;
EM_API em_sdpa_params em_sdpa_default_params(void);
/**
 * Scaled dot-product attention. q[B, Hq, Tq, D], k[B, Hkv, Tk, D], v[B, Hkv, Tk, Dv] with
 * Hq % Hkv == 0 (grouped-query attention: query head h uses kv head h / (Hq / Hkv));
 * mask (may be NULL) broadcastable to [B, Hq, Tq, Tk], bool (true = attend) or floating (added
 * to the logits). Logits, softmax and the weighted sum in f32, one rounding to q's dtype;
 * except with bf16 q, k and v on a CPU with AVX-512 BF16, where query blocks of 8 or more rows
 * (heads x queries) round the softmax weights to bf16 before the weighted sum (the products
 * then run on vdpbf16ps), as torch's CPU flash attention does for bf16. Rows
 * with no visible key (all false, -inf, or outside causal/window) give zeros, as torch's
 * scaled_dot_product_attention; a finite "minimum" float mask is added like any other value,
 * which gives the mean of v on such rows, as transformers' eager attention does. Returns
 * [B, Hq, Tq, Dv].
 */
#define em_sdpa(c, ...) em_sdpa_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_sdpa_(EM_OP_ARGS, em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *mask,
                           const em_sdpa_params *p);
/**
 * em_sdpa that also gives each row's log-sum-exp, as torch's _scaled_dot_product_flash_attention
 * returns logsumexp: lse[b, h, i] = log(sum_j exp(logit[b, h, i, j])) over the row's visible
 * keys, the logits scaled, softcapped and masked exactly as em_sdpa's, in f32. Ring attention
 * (context parallelism) merges the attention of a query block against several key blocks with
 * it: o = o_1 * exp(lse_1 - lse) + o_2 * exp(lse_2 - lse), lse = logaddexp(lse_1, lse_2).
 * Same inputs and parameters as em_sdpa (GQA, bool/float masks, causal, window, softcap). The
 * output [B, Hq, Tq, Dv] is out_dtype: q's dtype (em_sdpa's bits exactly) or EM_F32 (the same
 * f32 values before em_sdpa's final rounding, so a merge of blocks rounds once, at its end;
 * with bf16 inputs the softmax weights then stay f32, never rounded to bf16 as em_sdpa's bf16
 * route does). A row with no visible key gives zeros and lse -inf. The log-sum-exp [B, Hq, Tq] f32 is
 * written to *lse_out (may be NULL to drop it); both results are new tensors in the current
 * scope. Errors: em_sdpa's (EM_ERR_SHAPE / EM_ERR_DTYPE / EM_ERR_INVALID_ARG), an out_dtype
 * other than q's or f32 (EM_ERR_DTYPE); NULL returned and *lse_out NULL. A backend without a
 * kernel or lowering for it reports EM_ERR_UNSUPPORTED.
 */
#define em_sdpa_lse(c, ...) em_sdpa_lse_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_sdpa_lse_(EM_OP_ARGS, em_tensor *q, em_tensor *k, em_tensor *v,
                               em_tensor *mask, const em_sdpa_params *p, em_dtype out_dtype,
                               em_tensor **lse_out);
/**
 * Causal attention over a paged KV cache (vLLM's paged attention). The keys and values live in
 * pools k_pool[Hkv, S, D] and v_pool[Hkv, S, Dv] of S slots, cut into blocks of block_size
 * slots; row b's position p is slot block_table[b, p / block_size] * block_size +
 * p % block_size (block_table [B, MB], i32 or i64), and the row holds lens[b] positions (lens
 * [B], i32 or i64, at most MB * block_size). q[B, Hq, T, D] are the row's last T positions:
 * query i sits at position lens[b] - T + i and sees the keys at positions <= its own (and, with
 * p->window, > its own - window); a query without a visible key (lens[b] < T, padding rows with
 * lens[b] = 0) gives zeros. p->causal is ignored (always causal); p->scale 0 is 1/sqrt(D).
 * Logits, softmax and the weighted sum in f32, one rounding to q's dtype, as em_sdpa. Errors:
 * shapes and dtypes (EM_ERR_SHAPE / EM_ERR_DTYPE), a block id outside the pools or a length
 * past the table (EM_ERR_INVALID_ARG, from the kernel). Returns [B, Hq, T, Dv].
 */
#define em_paged_attention(c, ...) em_paged_attention_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_paged_attention_(EM_OP_ARGS, em_tensor *q, em_tensor *k_pool,
                                      em_tensor *v_pool, em_tensor *block_table, em_tensor *lens,
                                      int64_t block_size, const em_sdpa_params *p);
/** weight[V, D] rows for ids of any shape: [*ids, D]. */
#define em_embedding(c, ...) em_embedding_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_embedding_(EM_OP_ARGS, em_tensor *weight, em_tensor *ids);

/* ---- indexing ----
 * torch's semantics for every dtype (these ops move data bit for bit) and any strides. Index
 * tensors are i64 or i32 (torch wants i64 for some of them). An index value outside the indexed
 * dim is an EM_ERR_INDEX error naming the value, its position in the index and the dim's size;
 * negative values are errors too except for take_along_dim. Shape mismatches are EM_ERR_SHAPE
 * errors naming the shapes. Results are new contiguous tensors in the current scope. */
/** torch.index_select: slices of x along dim in the order of a 0-d or 1-d index; the dim's size
 *  becomes the index's length. A 0-d x takes one index value (0) and gives a 0-d result. */
#define em_index_select(c, ...) em_index_select_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_index_select_(EM_OP_ARGS, em_tensor *x, int dim, em_tensor *index);
/** torch.gather: out[i][j] = x[index[i][j]][j] (dim 0); out has index's shape, which may not
 *  exceed x's outside dim. */
#define em_gather(c, ...) em_gather_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_gather_(EM_OP_ARGS, em_tensor *x, int dim, em_tensor *index);
/** torch.take_along_dim: gather with broadcasting of x and index outside dim. Index values in
 *  [-size, 0) count from the end (torch 2.15 also wraps larger ones; here they are errors). */
#define em_take_along_dim(c, ...) em_take_along_dim_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_take_along_dim_(EM_OP_ARGS, em_tensor *x, em_tensor *index, int dim);
/** Out-of-place torch.scatter: a copy of x with out[index[i][j]][j] = src[i][j] (dim 0). index
 *  may not exceed src anywhere nor x outside dim. With duplicate indices along dim the last
 *  write wins here; torch leaves that case undefined. */
#define em_scatter(c, ...) em_scatter_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_scatter_(EM_OP_ARGS, em_tensor *x, int dim, em_tensor *index,
                              em_tensor *src);
/** Out-of-place torch.scatter_add: duplicates accumulate in index order; bf16/f16 sum in f32 and
 *  round once (as torch does), integers wrap, bool ORs. */
#define em_scatter_add(c, ...) em_scatter_add_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_scatter_add_(EM_OP_ARGS, em_tensor *x, int dim, em_tensor *index,
                                  em_tensor *src);
/** Out-of-place torch.index_add: x with alpha * src slices added at index (0-d or 1-d) along
 *  dim; src has x's shape with the index's length at dim. Duplicates accumulate in index order.
 *  bf16/f16 round like torch's CPU kernel: summed in f32 and rounded once when x has >= 2 dims,
 *  dim is the first or last, alpha is 1 and the index is i64; rounded after every addition
 *  otherwise. Integer dtypes truncate alpha. */
#define em_index_add(c, ...) em_index_add_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_index_add_(EM_OP_ARGS, em_tensor *x, int dim, em_tensor *index,
                                em_tensor *src, double alpha);
/**
 * torch's dst.index_copy_(dim, index, src), in place: dst[.., index[i], ..] = src[.., i, ..]
 * along dim (the write of Hugging Face's StaticCache). index is i64 or i32, 0-d or 1-d; src has
 * dst's dtype (no cast) and dst's shape except at dim, where it has the index's length. dst may
 * be a strided view (a slice of a bigger cache, say) but not an expanded one; nothing is
 * returned and no reference is taken: the caller keeps owning dst, index and src. Index values
 * must lie in [0, size of dim) (no counting from the end, as torch): on the CPU every value is
 * checked before anything is written, and a bad one is EM_ERR_INDEX naming it and its position,
 * with dst unchanged. On PJRT devices eager calls check them the same way (indices with up to
 * EMBER_PJRT_INDEX_CHECK elements); beyond that, and in compiled programs, an out-of-range
 * update is dropped (XLA scatter semantics). With duplicate indices the last write wins on the
 * CPU; elsewhere which one wins is unspecified, as in torch. Returns the status (EM_ERR_SHAPE,
 * EM_ERR_DTYPE, EM_ERR_INDEX, EM_ERR_INVALID_ARG, ...; the context holds the message).
 */
#define em_index_copy(c, ...) em_index_copy_((c), EM_HERE, __VA_ARGS__)
EM_API em_status em_index_copy_(EM_OP_ARGS, em_tensor *dst, int64_t dim, em_tensor *index,
                                em_tensor *src);
/**
 * torch.topk: the k largest (or smallest) values along dim, returned, and their i64 indices in
 * *indices_out (may be NULL). NaN counts as larger than every number. Equal values come out in
 * the same order as torch's CPU topk (which is not stable: libstdc++'s partial_sort when
 * k * 64 <= size, nth_element + sort otherwise). sorted=false gives the sorted order too. Not
 * for bool; k outside [0, size] is an EM_ERR_INDEX error.
 */
#define em_topk(c, ...) em_topk_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_topk_(EM_OP_ARGS, em_tensor *x, int64_t k, int dim, bool largest,
                           bool sorted, em_tensor **indices_out);
/** torch.sort(stable=True) along dim: values returned, i64 indices in *indices_out (may be
 *  NULL). Equal values (-0.0 and 0.0 included) keep their input order in both directions; NaNs
 *  sort above +inf (last ascending, first descending). */
#define em_sort(c, ...) em_sort_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_sort_(EM_OP_ARGS, em_tensor *x, int dim, bool descending,
                           em_tensor **indices_out);
/** The i64 indices of em_sort. */
#define em_argsort(c, ...) em_argsort_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_argsort_(EM_OP_ARGS, em_tensor *x, int dim, bool descending);
/** torch.cat of n (1 to 64) tensors of one dtype along dim; shapes must match outside dim. 1-d
 *  empty tensors are skipped whatever their shape, as in torch. */
#define em_cat(c, ...) em_cat_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_cat_(EM_OP_ARGS, em_tensor *const *xs, int n, int dim);
/** torch.stack of n (1 to 64) tensors of one dtype and shape along a new dim. */
#define em_stack(c, ...) em_stack_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_stack_(EM_OP_ARGS, em_tensor *const *xs, int n, int dim);
/** i64 one-hot [*index, num_classes] (num_classes > 0); a value outside [0, num_classes) is an
 *  EM_ERR_INDEX error. */
#define em_one_hot(c, ...) em_one_hot_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_one_hot_(EM_OP_ARGS, em_tensor *index, int64_t num_classes);
/** torch.repeat_interleave(x, repeats, dim): each slice along dim repeated `repeats` (>= 0)
 *  times in place. */
#define em_repeat_interleave(c, ...) em_repeat_interleave_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_repeat_interleave_(EM_OP_ARGS, em_tensor *x, int64_t repeats, int dim);

/* ---- convolution and resampling (NCHW) ---- */
typedef struct em_conv2d_params {
    int64_t stride[2], padding[2], dilation[2]; /* (h, w) */
    int64_t groups;
} em_conv2d_params;
/** stride 1, padding 0, dilation 1, groups 1. */
EM_API em_conv2d_params em_conv2d_default_params(void);
/**
 * torch.nn.functional.conv2d: x[N, C, H, W], w[O, C/groups, kh, kw], bias[O] or NULL, all of one
 * dtype (f32, bf16 or f16; any strides). Accumulates in f32 and rounds once to the dtype.
 * Output [N, O, (H + 2*pad - dil*(kh-1) - 1)/stride + 1, (same for W)]. p may be NULL (defaults).
 * Errors (shape): C or O not divisible by groups, w[1] != C/groups, a dilated kernel larger than
 * the padded input, an empty H or W; (invalid argument): stride or dilation < 1, padding < 0.
 */
#define em_conv2d(c, ...) em_conv2d_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_conv2d_(EM_OP_ARGS, em_tensor *x, em_tensor *w, em_tensor *bias,
                             const em_conv2d_params *p);
/**
 * Nearest-neighbour resize of x[N, C, H, W] to (out_h, out_w), as
 * F.interpolate(x, size=(out_h, out_w), mode="nearest"): source index floor(dst * in/out)
 * computed in f32 like torch, values copied exactly.
 */
#define em_upsample_nearest(c, ...) em_upsample_nearest_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_upsample_nearest_(EM_OP_ARGS, em_tensor *x, int64_t out_h, int64_t out_w);
/**
 * Bilinear resize of x[N, C, H, W] to (out_h, out_w), as F.interpolate(x, size=..., mode=
 * "bilinear", align_corners=...): torch's source positions and weights (f32), interpolation in
 * f32, one rounding to x's dtype. Any output size, larger or smaller.
 */
#define em_upsample_bilinear(c, ...) em_upsample_bilinear_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_upsample_bilinear_(EM_OP_ARGS, em_tensor *x, int64_t out_h, int64_t out_w,
                                        bool align_corners);
typedef struct em_pool2d_params {
    int64_t kernel[2], stride[2], padding[2];
    bool ceil_mode, count_include_pad;
} em_pool2d_params;
/** kernel k, stride k, padding 0, floor mode, count_include_pad true (torch's defaults). */
EM_API em_pool2d_params em_pool2d_default_params(int64_t k);
/**
 * F.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad) of x[N, C, H, W]: f32
 * sums, one rounding. Padding may be at most half the kernel; in ceil mode the last window may
 * hang over the padded input but starts inside it. p must not be NULL.
 */
#define em_avg_pool2d(c, ...) em_avg_pool2d_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_avg_pool2d_(EM_OP_ARGS, em_tensor *x, const em_pool2d_params *p);

/* ---- mixture of experts ---- */
/**
 * jax.lax.ragged_dot: lhs[M, K] rows grouped contiguously by group_sizes[G] (i32, >= 0,
 * sum <= M); rows of group g are multiplied by rhs[g] ([G, K, N], or [G, N, K] — the Hub's
 * expert layout — when rhs_nk). Rows past the sum give zeros. Returns [M, N].
 */
#define em_ragged_dot(c, ...) em_ragged_dot_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_ragged_dot_(EM_OP_ARGS, em_tensor *lhs, em_tensor *rhs,
                                 em_tensor *group_sizes, bool rhs_nk);
/**
 * The packed form of a [G, N, K] rhs (N a multiple of 32, K even): a new contiguous tensor
 * [G, N/32, K/2, 32, 2] holding rhs[g, 32p + c, 2s + h] at [g, p, s, c, h], on rhs's device
 * and in its dtype — vdpbf16ps's operand layout, in which each 32-column panel of a matrix is
 * one sequential stream. em_ragged_dot takes it as rhs with rhs_nk = true and gives the same
 * result; on the CPU, bf16 with AVX-512 BF16 then runs a kernel that reads each panel once per
 * 10 rows and reaches the memory bandwidth at decode sizes where the [G, N, K] kernel does not
 * (README, MoE benchmark); with AVX2, one that reads it once per 2 rows (faster at 1-2 rows per
 * group, docs/performance-avx2.md). Same number of bytes as rhs; the caller owns both and may free rhs.
 * EM_ERR_SHAPE (rank, N or K), NULL on error.
 */
#define em_ragged_pack(c, ...) em_ragged_pack_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_ragged_pack_(EM_OP_ARGS, em_tensor *rhs_nk);
/** The inverse: [G, N/32, K/2, 32, 2] -> a contiguous [G, N, K]. EM_ERR_SHAPE, NULL on error. */
#define em_ragged_unpack(c, ...) em_ragged_unpack_((c), EM_HERE, __VA_ARGS__)
EM_API em_tensor *em_ragged_unpack_(EM_OP_ARGS, em_tensor *packed);
/** Whether packing pays for weights of dtype on dev (NULL: the CPU): true on the CPU for bf16
 *  where the kernel level in use (EMBER_CPU_LEVEL honoured) has a packed kernel that measured
 *  faster than the [G, N, K] one: AVX-512 BF16, AVX2, and NEON with FEAT_BF16 on aarch64 (not
 *  the portable C level). A packed rhs is correct on every device (elsewhere it is unpacked on
 *  the fly); this says where it is faster. */
EM_API bool em_ragged_pack_pays(const em_device *dev, em_dtype dtype);

/* ---- training ---- */
/**
 * torch's AdamW update of one parameter (torch.optim.AdamW's single-tensor path), in place:
 *   p = p * decay;  m = m + (g - m) * (1 - beta1);  v = v * beta2 + g * g * (1 - beta2);
 *   p = p + m / (sqrt(v) / sqrt_bc2 + eps) * neg_step
 * with the step's numbers as 0-d floating tensors on p's device: decay = 1 - lr * weight_decay,
 * sqrt_bc2 = sqrt(1 - beta2^step), neg_step = -lr / (1 - beta1^step) (tensors, so a compiled
 * step takes them as inputs instead of baking them in). p, g, m, v: contiguous, of one shape and
 * one floating dtype; p, m and v are written, g is only read; none is retained. On the CPU f32
 * runs as one pass over the four tensors; other dtypes, other devices and compiled programs run
 * the same arithmetic as element-wise ops (each rounded to the dtype, as torch's), slab by slab
 * of rows of about 2^20 elements so that their temporaries stay small. Not differentiable:
 * call it with grad disabled. Returns the status (EM_ERR_DTYPE, EM_ERR_SHAPE, EM_ERR_INVALID_ARG
 * naming the tensor; the context holds the message); on error nothing is written.
 */
#define em_adamw_step(c, ...) em_adamw_step_((c), EM_HERE, __VA_ARGS__)
EM_API em_status em_adamw_step_(EM_OP_ARGS, em_tensor *p, em_tensor *g, em_tensor *m,
                                em_tensor *v, em_tensor *decay, em_tensor *sqrt_bc2,
                                em_tensor *neg_step, double beta1, double beta2, double eps);

/* ---- generic access to the op table (tests, tools, bindings) ---- */
/** Number of ops in the table and the name of op i. */
EM_API int em_op_count(void);
EM_API const char *em_op_name(int i);

#ifdef __cplusplus
}
#endif
#endif
