/*
 * Rotary embedding parameters: the inverse frequencies and attention scaling that transformers'
 * rope initialisation functions compute (modeling_rope_utils.py, and the models' own
 * compute_default_rope_parameters with partial_rotary_factor as GPT-NeoX has it).
 *
 * transformers computes the frequencies with f32 tensors and Python (double) scalars; the code
 * below performs the same operations in the same order and precision — a double scalar meeting
 * an f32 tensor is first rounded to f32, as torch does — so the results agree to the last bit
 * or within one ulp (torch's vectorised pow is not always correctly rounded).
 */
#include <math.h>

#include "core/tensor_impl.h"
#include "ember/ops.h"

#define OP "rope_inv_freq"

em_rope_config em_rope_config_default(void) {
    em_rope_config c = {
        .type = EM_ROPE_DEFAULT,
        .theta = 10000.0,
        .head_dim = 0,
        .partial_rotary_factor = 1.0,
        .factor = 1.0,
        .max_position_embeddings = 0,
        .original_max_position_embeddings = 0,
        .low_freq_factor = 1.0,
        .high_freq_factor = 4.0,
        .beta_fast = 32.0,
        .beta_slow = 1.0,
        .attention_factor = 0.0,
        .mscale = 0.0,
        .mscale_all_dim = 0.0,
        .truncate = true,
    };
    return c;
}

/* torch's f32 pow: correctly rounded in practice, which the double pow rounded to f32 is
 * (glibc's powf is not always: it differs by an ulp now and then) */
static float pow_f32(float b, double e) { return (float)pow((double)b, e); }

/* 1 / base ** (arange(0, dim, 2) / dim), in f32 as torch computes it. */
static void base_inv_freq(float base, int64_t dim, int n, float *out) {
    for (int i = 0; i < n; i++) {
        float e = (float)(2 * i) / (float)dim;
        out[i] = 1.0f / pow_f32(base, e);
    }
}

/* YaRN's get_mscale */
static double yarn_mscale(double scale, double m) {
    return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

/* YaRN's find_correction_dim */
static double yarn_corr_dim(double rot, int64_t dim, double base, double max_pos) {
    return ((double)dim * log(max_pos / (rot * 2 * M_PI))) / (2 * log(base));
}

/* Gemma 4's proportional rope (_compute_proportional_rope_parameters): the exponents are
 * taken over the whole head, and the head keeps its size, so that rotate_half pairs dim i with
 * i + head_dim / 2 whatever fraction rotates. */
static int proportional(em_ctx *c, const em_rope_config *cfg, float *inv_freq, int max_n,
                        float *attention_scaling) {
    double prf = cfg->partial_rotary_factor;
    if (!(prf >= 0 && prf <= 1)) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "proportional rope: partial_rotary_factor %g is not in "
                "[0, 1]", prf);
        return -1;
    }
    if (!(cfg->factor > 0)) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "proportional rope needs factor > 0 (got %g)",
                cfg->factor);
        return -1;
    }
    int64_t hd = cfg->head_dim;
    if (hd < 2 || hd % 2) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "proportional rope needs an even head_dim (got %lld)",
                (long long)hd);
        return -1;
    }
    int n = (int)(hd / 2);
    if (n > max_n) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "%d frequencies do not fit the output array of %d", n,
                max_n);
        return -1;
    }
    /* int(rope_proportion * head_dim // 2): a float floor division in Python */
    int angles = (int)floor(prf * (double)hd / 2.0);
    if (angles > n) angles = n;
    base_inv_freq((float)cfg->theta, hd, angles, inv_freq);
    for (int i = angles; i < n; i++) inv_freq[i] = 0.0f;
    for (int i = 0; i < n; i++) inv_freq[i] /= (float)cfg->factor;
    if (attention_scaling) *attention_scaling = 1.0f;
    return n;
}

static const char *type_name(em_rope_type t) {
    switch (t) {
    case EM_ROPE_DEFAULT: return "default";
    case EM_ROPE_LINEAR: return "linear";
    case EM_ROPE_DYNAMIC: return "dynamic";
    case EM_ROPE_LLAMA3: return "llama3";
    case EM_ROPE_YARN: return "yarn";
    case EM_ROPE_PROPORTIONAL: return "proportional";
    }
    return "?";
}

int em_rope_inv_freq(em_ctx *c, const em_rope_config *cfg, int64_t seq_len, float *inv_freq,
                     int max_n, float *attention_scaling) {
    if (!c || c->err.status) return -1;
    if (!cfg || !inv_freq) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "config or output array is NULL");
        return -1;
    }
    if ((unsigned)cfg->type > EM_ROPE_PROPORTIONAL) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "unknown rope type %d", (int)cfg->type);
        return -1;
    }
    const char *tn = type_name(cfg->type);
    if (!(cfg->theta > 0) || cfg->head_dim <= 0) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "%s rope needs theta > 0 and head_dim > 0 (got %g, %lld)",
                tn, cfg->theta, (long long)cfg->head_dim);
        return -1;
    }
    double prf = cfg->partial_rotary_factor;
    if (cfg->type == EM_ROPE_PROPORTIONAL) return proportional(c, cfg, inv_freq, max_n,
                                                               attention_scaling);
    if (!(prf > 0 && prf <= 1)) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "partial_rotary_factor %g is not in (0, 1]", prf);
        return -1;
    }
    /* int(head_dim * partial_rotary_factor), as transformers writes it */
    int64_t dim = (int64_t)((double)cfg->head_dim * prf);
    if (dim < 2 || dim % 2) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP,
                "rotary dimension %lld (head_dim %lld x partial_rotary_factor %g) must be even "
                "and at least 2", (long long)dim, (long long)cfg->head_dim, prf);
        return -1;
    }
    int n = (int)(dim / 2);
    if (n > max_n) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "%d frequencies do not fit the output array of %d", n,
                max_n);
        return -1;
    }
    double factor = cfg->factor;
    bool needs_factor = cfg->type == EM_ROPE_LINEAR || cfg->type == EM_ROPE_DYNAMIC ||
                        cfg->type == EM_ROPE_LLAMA3;
    if (needs_factor && !(factor > 0)) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP, "%s rope needs factor > 0 (got %g)", tn, factor);
        return -1;
    }
    int64_t max_pos = cfg->max_position_embeddings;
    int64_t orig = cfg->original_max_position_embeddings ? cfg->original_max_position_embeddings
                                                         : max_pos;
    if ((cfg->type == EM_ROPE_DYNAMIC && max_pos <= 0) ||
        ((cfg->type == EM_ROPE_LLAMA3 || cfg->type == EM_ROPE_YARN) && orig <= 0)) {
        EM_FAIL(c, EM_ERR_INVALID_ARG, OP,
                "%s rope needs max_position_embeddings%s > 0 (got %lld, original %lld)", tn,
                cfg->type == EM_ROPE_DYNAMIC ? "" : " or original_max_position_embeddings",
                (long long)max_pos, (long long)cfg->original_max_position_embeddings);
        return -1;
    }
    float scaling = 1.0f;

    switch (cfg->type) {
    case EM_ROPE_PROPORTIONAL: break; /* returned above */
    case EM_ROPE_DEFAULT: base_inv_freq((float)cfg->theta, dim, n, inv_freq); break;
    case EM_ROPE_LINEAR:
        base_inv_freq((float)cfg->theta, dim, n, inv_freq);
        for (int i = 0; i < n; i++) inv_freq[i] /= (float)factor;
        break;
    case EM_ROPE_DYNAMIC: {
        double ex = (double)dim / (double)(dim - 2);
        if (seq_len <= max_pos) {
            /* the frequencies made at initialisation (Python scalars: double) */
            double base = cfg->theta * pow(factor * (double)max_pos / (double)max_pos -
                                           (factor - 1), ex);
            base_inv_freq((float)base, dim, n, inv_freq);
            break;
        }
        /* dynamic_frequency_update: seq_len is a tensor there, so the new base is an f32
         * value (the exponent, a Python float, stays double inside torch's pow) */
        float t = (float)factor * (float)seq_len;
        t = t / (float)max_pos;
        t = t - (float)(factor - 1);
        base_inv_freq((float)cfg->theta * pow_f32(t, ex), dim, n, inv_freq);
        break;
    }
    case EM_ROPE_LLAMA3: {
        double lo = cfg->low_freq_factor, hi = cfg->high_freq_factor;
        if (!(lo > 0) || !(hi > 0) || lo == hi) {
            EM_FAIL(c, EM_ERR_INVALID_ARG, OP,
                    "llama3 rope needs distinct positive low/high_freq_factor (got %g, %g)", lo, hi);
            return -1;
        }
        base_inv_freq((float)cfg->theta, dim, n, inv_freq);
        float low_wl = (float)((double)orig / lo), high_wl = (float)((double)orig / hi);
        float two_pi = (float)(2 * M_PI), f = (float)factor, origf = (float)orig;
        float lof = (float)lo, span = (float)(hi - lo);
        for (int i = 0; i < n; i++) {
            float inv = inv_freq[i];
            float wl = two_pi / inv;
            float il = wl > low_wl ? inv / f : inv;
            float sf = (origf / wl - lof) / span;
            float smooth = (1.0f - sf) * il / f + sf * il;
            bool medium = !(wl < high_wl) && !(wl > low_wl);
            inv_freq[i] = medium ? smooth : il;
        }
        break;
    }
    case EM_ROPE_YARN: {
        if (!(factor > 0)) factor = (double)max_pos / (double)orig; /* DeepSeek-V3's convention */
        double att = cfg->attention_factor;
        if (!(att > 0))
            att = cfg->mscale != 0 && cfg->mscale_all_dim != 0
                      ? yarn_mscale(factor, cfg->mscale) / yarn_mscale(factor, cfg->mscale_all_dim)
                      : yarn_mscale(factor, 1.0);
        double bf = cfg->beta_fast ? cfg->beta_fast : 32, bs = cfg->beta_slow ? cfg->beta_slow : 1;
        double lo = yarn_corr_dim(bf, dim, cfg->theta, (double)orig);
        double hi = yarn_corr_dim(bs, dim, cfg->theta, (double)orig);
        if (cfg->truncate) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        if (lo < 0) lo = 0;
        if (hi > (double)(dim - 1)) hi = (double)(dim - 1);
        if (lo == hi) hi += 0.001; /* transformers: prevent singularity */
        float b = (float)cfg->theta, ff = (float)factor, lof = (float)lo, span = (float)(hi - lo);
        for (int i = 0; i < n; i++) {
            float pf = pow_f32(b, (float)(2 * i) / (float)dim);
            float extra = 1.0f / pf, inter = 1.0f / (ff * pf);
            float ramp = ((float)i - lof) / span;
            ramp = ramp < 0 ? 0.0f : ramp > 1 ? 1.0f : ramp;
            float ef = 1.0f - ramp;
            inv_freq[i] = inter * (1.0f - ef) + extra * ef;
        }
        scaling = (float)att;
        break;
    }
    }
    if (attention_scaling) *attention_scaling = scaling;
    return n;
}
