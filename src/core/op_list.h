/*
 * The op table: the one place an op is defined.
 *
 * X(ID, "name", kind, min_inputs, max_inputs, outputs, "attribute schema", shape_rule)
 *
 *  kind        EW (element-wise: broadcasting, fusable), REDUCE, VIEW (no kernel: shares storage),
 *              CREATE (no tensor inputs), OTHER.
 *  max_inputs  -1: variadic (cat, stack).  Inputs between min and max are optional (may be NULL).
 *  outputs     -1: decided by the shape rule (split).
 *  schema      "name:type,..." with type int | float | bool | ints | dtype. Every attribute has a
 *              value in every call; the public wrappers in ops/api_core.c and ops/api_nn.c fill them.
 *  shape_rule  checks arguments, infers output dtypes and shapes (core/rules_*.c).
 *  The backward rule of a differentiable op is its entry, by op id, in ops/grad_rules_*.c.
 *
 * Append new ops at the end of their family; ids are not stable across versions (not ABI).
 */
#ifndef EMBER_OP_LIST_H
#define EMBER_OP_LIST_H

#define EM_OP_LIST(X)                                                                              \
    /* creation */                                                                                 \
    X(EMPTY, "empty", CREATE, 0, 0, 1, "dtype:dtype,shape:ints", rule_create)                      \
    X(FULL, "full", CREATE, 0, 0, 1, "dtype:dtype,shape:ints,value:float", rule_create)            \
    X(ARANGE, "arange", CREATE, 0, 0, 1, "dtype:dtype,start:float,end:float,step:float",           \
      rule_arange)                                                                                 \
    X(EYE, "eye", CREATE, 0, 0, 1, "dtype:dtype,shape:ints", rule_create)                          \
    X(RAND_UNIFORM, "rand_uniform", CREATE, 0, 0, 1,                                               \
      "dtype:dtype,shape:ints,seed:int,low:float,high:float", rule_create)                         \
    X(RAND_NORMAL, "rand_normal", CREATE, 0, 0, 1,                                                 \
      "dtype:dtype,shape:ints,seed:int,mean:float,std:float", rule_create)                         \
    /* views and layout */                                                                         \
    X(RESHAPE, "reshape", VIEW, 1, 1, 1, "shape:ints", rule_reshape)                               \
    X(VIEW, "view", VIEW, 1, 1, 1, "shape:ints", rule_reshape)                                     \
    X(PERMUTE, "permute", VIEW, 1, 1, 1, "dims:ints", rule_permute)                                \
    X(TRANSPOSE, "transpose", VIEW, 1, 1, 1, "dim0:int,dim1:int", rule_transpose)                  \
    X(SLICE, "slice", VIEW, 1, 1, 1, "dim:int,start:int,end:int,step:int", rule_slice)             \
    X(EXPAND, "expand", VIEW, 1, 1, 1, "shape:ints", rule_expand)                                  \
    X(SQUEEZE, "squeeze", VIEW, 1, 1, 1, "dims:ints,all:bool", rule_squeeze)                       \
    X(UNSQUEEZE, "unsqueeze", VIEW, 1, 1, 1, "dim:int", rule_unsqueeze)                            \
    X(SPLIT, "split", VIEW, 1, 1, -1, "dim:int,sizes:ints,size:int", rule_split)                   \
    X(CONTIGUOUS, "contiguous", OTHER, 1, 1, 1, "", rule_same)                                     \
    X(ASSIGN, "assign", OTHER, 2, 2, 0, "", rule_assign)                                           \
    /* element-wise, unary */                                                                      \
    X(NEG, "neg", EW, 1, 1, 1, "", rule_ew_keep_num)                                               \
    X(ABS, "abs", EW, 1, 1, 1, "", rule_ew_keep_num)                                               \
    X(EXP, "exp", EW, 1, 1, 1, "", rule_ew_float)                                                  \
    X(LOG, "log", EW, 1, 1, 1, "", rule_ew_float)                                                  \
    X(SQRT, "sqrt", EW, 1, 1, 1, "", rule_ew_float)                                                \
    X(RSQRT, "rsqrt", EW, 1, 1, 1, "", rule_ew_float)                                              \
    X(SIN, "sin", EW, 1, 1, 1, "", rule_ew_float)                                                  \
    X(COS, "cos", EW, 1, 1, 1, "", rule_ew_float)                                                  \
    X(TANH, "tanh", EW, 1, 1, 1, "", rule_ew_float)                                                \
    X(SIGMOID, "sigmoid", EW, 1, 1, 1, "", rule_ew_float)                                          \
    X(SILU, "silu", EW, 1, 1, 1, "", rule_ew_float)                                                \
    X(GELU, "gelu", EW, 1, 1, 1, "approximate:bool", rule_ew_float)                                \
    X(RELU, "relu", EW, 1, 1, 1, "", rule_ew_keep_num)                                             \
    X(CLAMP, "clamp", EW, 1, 1, 1, "min:float,max:float,has_min:bool,has_max:bool",                \
      rule_ew_keep_num)                                                                            \
    X(LOGICAL_NOT, "logical_not", EW, 1, 1, 1, "", rule_ew_bool)                                   \
    X(CAST, "cast", EW, 1, 1, 1, "dtype:dtype", rule_ew_cast)                                      \
    /* element-wise, binary (NumPy broadcasting, torch type promotion) */                          \
    X(ADD, "add", EW, 2, 2, 1, "", rule_ew_promote)                                                \
    X(SUB, "sub", EW, 2, 2, 1, "", rule_ew_promote_num)                                            \
    X(MUL, "mul", EW, 2, 2, 1, "", rule_ew_promote)                                                \
    X(DIV, "div", EW, 2, 2, 1, "", rule_ew_promote_float)                                          \
    X(POW, "pow", EW, 2, 2, 1, "", rule_ew_promote_num)                                            \
    X(MAXIMUM, "maximum", EW, 2, 2, 1, "", rule_ew_promote)                                        \
    X(MINIMUM, "minimum", EW, 2, 2, 1, "", rule_ew_promote)                                        \
    X(EQ, "eq", EW, 2, 2, 1, "", rule_ew_compare)                                                  \
    X(NE, "ne", EW, 2, 2, 1, "", rule_ew_compare)                                                  \
    X(LT, "lt", EW, 2, 2, 1, "", rule_ew_compare)                                                  \
    X(LE, "le", EW, 2, 2, 1, "", rule_ew_compare)                                                  \
    X(GT, "gt", EW, 2, 2, 1, "", rule_ew_compare)                                                  \
    X(GE, "ge", EW, 2, 2, 1, "", rule_ew_compare)                                                  \
    X(LOGICAL_AND, "logical_and", EW, 2, 2, 1, "", rule_ew_bool)                                   \
    X(LOGICAL_OR, "logical_or", EW, 2, 2, 1, "", rule_ew_bool)                                     \
    /* element-wise, ternary */                                                                    \
    X(WHERE, "where", EW, 3, 3, 1, "", rule_ew_where)                                              \
    /* reductions */                                                                               \
    X(SUM, "sum", REDUCE, 1, 1, 1, "dims:ints,keepdim:bool", rule_reduce)                          \
    X(MEAN, "mean", REDUCE, 1, 1, 1, "dims:ints,keepdim:bool", rule_reduce_float)                  \
    X(MAX, "max", REDUCE, 1, 1, 1, "dims:ints,keepdim:bool", rule_reduce_keep)                     \
    X(MIN, "min", REDUCE, 1, 1, 1, "dims:ints,keepdim:bool", rule_reduce_keep)                     \
    X(PROD, "prod", REDUCE, 1, 1, 1, "dims:ints,keepdim:bool", rule_reduce)                        \
    X(VAR, "var", REDUCE, 1, 1, 1, "dims:ints,keepdim:bool,correction:int", rule_reduce_float)     \
    X(ARGMAX, "argmax", REDUCE, 1, 1, 1, "dim:int,keepdim:bool,flatten:bool", rule_arg_reduce)     \
    X(ARGMIN, "argmin", REDUCE, 1, 1, 1, "dim:int,keepdim:bool,flatten:bool", rule_arg_reduce)     \
    X(SOFTMAX, "softmax", OTHER, 1, 1, 1, "dim:int", rule_softmax)                                 \
    X(LOG_SOFTMAX, "log_softmax", OTHER, 1, 1, 1, "dim:int", rule_softmax)                         \
    X(CUMSUM, "cumsum", OTHER, 1, 1, 1, "dim:int", rule_cumsum)                                    \
    /* linear algebra */                                                                           \
    X(MATMUL, "matmul", OTHER, 2, 2, 1, "", rule_matmul)                                           \
    X(LINEAR, "linear", OTHER, 2, 3, 1, "", rule_linear)                                           \
    /* normalisation */                                                                            \
    X(RMS_NORM, "rms_norm", OTHER, 1, 2, 1, "eps:float,unit_offset:bool", rule_rms_norm)           \
    X(LAYER_NORM, "layer_norm", OTHER, 1, 3, 1, "eps:float", rule_layer_norm)                      \
    X(GROUP_NORM, "group_norm", OTHER, 1, 3, 1, "groups:int,eps:float", rule_group_norm)           \
    /* transformer */                                                                              \
    X(ROPE_COS_SIN, "rope_cos_sin", OTHER, 2, 2, 2, "scaling:float,dtype:dtype",                   \
      rule_rope_cos_sin)                                                                           \
    X(ROPE, "rope", OTHER, 3, 3, 1, "", rule_rope)                                                 \
    X(SDPA, "sdpa", OTHER, 3, 4, 1, "scale:float,causal:bool,window:int,softcap:float",            \
      rule_sdpa)                                                                                   \
    /* sdpa that also gives each row's log-sum-exp of its logits [B,Hq,Tq] f32 (torch's */         \
    /* flash attention's logsumexp; ring attention merges blocks with it); out in `dtype`, */      \
    /* q's or f32 (ops.h, em_sdpa_lse) */                                                         \
    X(SDPA_LSE, "sdpa_lse", OTHER, 3, 4, 2,                                                        \
      "scale:float,causal:bool,window:int,softcap:float,dtype:dtype", rule_sdpa_lse)               \
    /* attention over a paged KV cache: q [B,Hq,T,D], pools [Hkv,S,D], block table [B,MB], */  \
    /* per-row lengths [B] (ops.h, em_paged_attention) */                                       \
    X(PAGED_ATTENTION, "paged_attention", OTHER, 5, 5, 1,                                          \
      "block_size:int,scale:float,window:int,softcap:float", rule_paged_attention)                 \
    X(EMBEDDING, "embedding", OTHER, 2, 2, 1, "", rule_embedding)                                  \
    /* indexing */                                                                                 \
    X(INDEX_SELECT, "index_select", OTHER, 2, 2, 1, "dim:int", rule_index_select)                  \
    X(GATHER, "gather", OTHER, 2, 2, 1, "dim:int", rule_gather)                                    \
    X(TAKE_ALONG_DIM, "take_along_dim", OTHER, 2, 2, 1, "dim:int", rule_take_along_dim)            \
    X(SCATTER, "scatter", OTHER, 3, 3, 1, "dim:int", rule_scatter)                                 \
    X(SCATTER_ADD, "scatter_add", OTHER, 3, 3, 1, "dim:int", rule_scatter)                         \
    X(INDEX_ADD, "index_add", OTHER, 3, 3, 1, "dim:int,alpha:float", rule_index_add)               \
    /* in place, as torch's index_copy_ (the static KV cache's write): dst[.., index[i], ..] = */  \
    /* src[.., i, ..] along dim; no outputs */                                                     \
    X(INDEX_COPY, "index_copy", OTHER, 3, 3, 0, "dim:int", rule_index_copy)                        \
    X(TOPK, "topk", OTHER, 1, 1, 2, "k:int,dim:int,largest:bool,sorted:bool", rule_topk)           \
    X(SORT, "sort", OTHER, 1, 1, 2, "dim:int,descending:bool", rule_sort)                          \
    X(ARGSORT, "argsort", OTHER, 1, 1, 1, "dim:int,descending:bool", rule_argsort)                 \
    X(CAT, "cat", OTHER, 1, -1, 1, "dim:int", rule_cat)                                            \
    X(STACK, "stack", OTHER, 1, -1, 1, "dim:int", rule_stack)                                      \
    X(ONE_HOT, "one_hot", OTHER, 1, 1, 1, "num_classes:int", rule_one_hot)                         \
    X(REPEAT_INTERLEAVE, "repeat_interleave", OTHER, 1, 1, 1, "repeats:int,dim:int",               \
      rule_repeat_interleave)                                                                      \
    /* convolution and resampling (diffusion) */                                                   \
    X(CONV2D, "conv2d", OTHER, 2, 3, 1, "stride:ints,padding:ints,dilation:ints,groups:int",      \
      rule_conv2d)                                                                                 \
    X(UPSAMPLE_NEAREST, "upsample_nearest", OTHER, 1, 1, 1, "size:ints", rule_upsample)            \
    X(UPSAMPLE_BILINEAR, "upsample_bilinear", OTHER, 1, 1, 1, "size:ints,align_corners:bool",      \
      rule_upsample)                                                                               \
    X(AVG_POOL2D, "avg_pool2d", OTHER, 1, 1, 1,                                                    \
      "kernel:ints,stride:ints,padding:ints,ceil_mode:bool,count_include_pad:bool",              \
      rule_avg_pool2d)                                                                             \
    /* mixture of experts */                                                                       \
    X(RAGGED_DOT, "ragged_dot", OTHER, 3, 3, 1, "rhs_nk:bool", rule_ragged_dot)                  \
    /* collectives over a process group (group: an id of core/group.h; reduce: em_reduce_op) */  \
    X(ALL_REDUCE, "all_reduce", OTHER, 1, 1, 1, "reduce:int,group:int", rule_all_reduce)         \
    X(ALL_GATHER, "all_gather", OTHER, 1, 1, 1, "dim:int,group:int", rule_all_gather)            \
    X(REDUCE_SCATTER, "reduce_scatter", OTHER, 1, 1, 1, "reduce:int,dim:int,group:int",          \
      rule_reduce_scatter)                                                                       \
    X(ALL_TO_ALL, "all_to_all", OTHER, 1, 1, 1, "split_dim:int,concat_dim:int,group:int",        \
      rule_all_to_all)                                                                             \
    X(RING_SHIFT, "ring_shift", OTHER, 1, 1, 1, "offset:int,group:int", rule_ring_shift)         \
    /* training: torch's AdamW update of one parameter, in place on p, m, v (inputs p, g, m, v */  \
    /* and the step's 0-d f32 numbers decay, sqrt(bias_correction2), -lr/bias_correction1) */    \
    X(ADAMW_STEP, "adamw_step", OTHER, 7, 7, 0, "beta1:float,beta2:float,eps:float",              \
      rule_adamw_step)

#endif
