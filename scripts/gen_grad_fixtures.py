#!/usr/bin/env python3
"""Generates the gradient test fixtures in tests/fixtures/grad/ from torch.autograd.

Usage: python scripts/gen_grad_fixtures.py
Needs the pinned versions of scripts/requirements-fixtures.txt.

The files have the op fixtures' format (scripts/fixtures/common.py: <family>.json + .bin), and
each case adds
  grad_out  the upstream gradient of each output (what em_backward_grad is given),
  grads     torch's gradient of each input (null: the input gets none: an index, a mask, or an
            input not marked); for an input stored as a View, the gradient of the stored tensor
            (the C runner marks it before applying the view ops, so the gradient flows through
            them),
  alias     (optional) input k is the same tensor as input 0 (a tensor used twice),
  grad_atol, grad_rtol  (optional) the gradients' tolerances when not 1e-5 (bf16 inputs get
            bf16 gradients).
The reference is computed in float64 from the f32 inputs and rounded to f32: torch's float64
autograd is exact to far below the 1e-5 the C test allows, so the test measures Ember alone.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from fixtures.common import View, Writer, gen, permuted, randint, randn  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "grad")


def run(fn, inputs, wanted, keep64=False):
    """Forward and backward of fn in float64. Returns (outputs, upstream grads, input grads)."""
    leaves, args = [], []
    for x, want in zip(inputs, wanted):
        if x is None:
            leaves.append(None)
            args.append(None)
            continue
        base = x.base if isinstance(x, View) else x
        leaf = base.detach().to(torch.float64) if base.is_floating_point() else base.detach()
        if want:
            leaf.requires_grad_(True)
        leaves.append(leaf)
        args.append(View(leaf, x.ops).tensor() if isinstance(x, View) else leaf)
    outs = fn(*args)
    if not isinstance(outs, (tuple, list)):
        outs = [outs]
    g = gen(len(outs) * 7 + 1)
    gouts = [torch.randn(o.shape, generator=g, dtype=torch.float64) for o in outs]
    torch.autograd.backward(list(outs), gouts)
    # results as Ember gives them from f32 inputs (f32, or what the op asked for, as cast's f64)
    f32 = [o.detach().to(torch.float32 if o.dtype == torch.float64 and not keep64 else o.dtype)
           for o in outs]
    # each gradient in its input's dtype (f32, or bf16 for a bf16 input, as torch gives it)
    grads = [l.grad.to(torch.bfloat16 if (x.base if isinstance(x, View) else x).dtype ==
                       torch.bfloat16 else torch.float32) if l is not None and want else None
             for l, want, x in zip(leaves, wanted, inputs)]
    return f32, [go.to(torch.float32) for go in gouts], grads


def case(w, name, op, inputs, fn, attrs=None, wanted=None, atol=1e-5, rtol=1e-5, alias=None,
         keep64=False):
    wanted = wanted or [x is not None and (x.base if isinstance(x, View) else x).is_floating_point()
                        for x in inputs]
    outs, gouts, grads = run(fn, inputs, wanted, keep64)
    w.case(name, op, inputs, outs, attrs=attrs, atol=atol, rtol=rtol)
    c = w.cases[-1]
    c["grad_out"] = [w._tensor(t) for t in gouts]
    c["grads"] = [None if t is None else w._tensor(t) for t in grads]
    if alias is not None:
        c["alias"] = alias


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def rope_ref(x, cos, sin):
    r = cos.shape[-1]
    c4, s4 = cos[:, None], sin[:, None]
    xr = x[..., :r]
    return torch.cat([xr * c4 + rotate_half(xr) * s4, x[..., r:]], dim=-1)


def sdpa_logits(q, k, mask, scale, causal, window, softcap):
    """The scaled, capped, masked logits of attention (-inf where a key is not visible)."""
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, 1)
    s = q @ k.transpose(-1, -2) * (scale or 1 / math.sqrt(q.shape[-1]))
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    tq, tk = q.shape[2], k.shape[2]
    rel = torch.arange(tk)[None, :] - (torch.arange(tq)[:, None] + tk - tq)
    ok = torch.ones(tq, tk, dtype=torch.bool)
    if causal:
        ok &= rel <= 0
    if window:
        ok &= rel > -window
    return s.masked_fill(~ok, float("-inf"))


def sdpa_lse_ref(q, k, v, mask, scale, causal, window, softcap):
    """sdpa_lse's two outputs with plain ops: out = softmax(s) @ v (zeros on a row that sees
    no key) and lse = logsumexp(s) over the keys (-inf on such a row; the masked_fill of the
    logits stops the gradient there, so the row's inputs get 0, not NaN)."""
    s = sdpa_logits(q, k, mask, scale, causal, window, softcap)
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ v.repeat_interleave(q.shape[1] // k.shape[1], 1), torch.logsumexp(s, -1)


def sdpa_ref(q, k, v, mask, scale, causal, window, softcap):
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, 1)
    v = v.repeat_interleave(rep, 1)
    s = q @ k.transpose(-1, -2) * (scale or 1 / math.sqrt(q.shape[-1]))
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    tq, tk = q.shape[2], k.shape[2]
    rel = torch.arange(tk)[None, :] - (torch.arange(tq)[:, None] + tk - tq)
    ok = torch.ones(tq, tk, dtype=torch.bool)
    if causal:
        ok &= rel <= 0
    if window:
        ok &= rel > -window
    s = s.masked_fill(~ok, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ v


def ragged_ref(x, w, gs, nk):
    out, at = [], 0
    for gi, n in enumerate(gs.tolist()):
        wg = w[gi].T if nk else w[gi]
        out.append(x[at:at + n] @ wg)
        at += n
    out.append(x[at:] @ torch.zeros_like(w[0].T if nk else w[0]))
    return torch.cat(out)


def build(w):
    g = gen(19)
    pos = lambda *s: randn(g, *s).abs() + 0.5  # noqa: E731

    # ---- element-wise, unary ----
    x = randn(g, 4, 7)
    for op, fn, inp in [("neg", torch.neg, x), ("abs", torch.abs, x), ("exp", torch.exp, x),
                        ("log", torch.log, pos(4, 7)), ("sqrt", torch.sqrt, pos(4, 7)),
                        ("rsqrt", torch.rsqrt, pos(4, 7)), ("sin", torch.sin, x),
                        ("cos", torch.cos, x), ("tanh", torch.tanh, x),
                        ("sigmoid", torch.sigmoid, x), ("silu", F.silu, x), ("relu", F.relu, x)]:
        case(w, f"{op}/f32", op, [inp], fn)
    case(w, "silu/f32/strided", "silu", [permuted(randn(g, 3, 5, 4), (2, 0, 1))], F.silu)
    case(w, "gelu/f32/erf", "gelu", [randn(g, 5, 6) * 3], F.gelu, attrs={"approximate": False})
    case(w, "gelu/f32/tanh", "gelu", [randn(g, 5, 6) * 3],
         lambda t: F.gelu(t, approximate="tanh"), attrs={"approximate": True})
    case(w, "clamp/f32", "clamp", [randn(g, 4, 7)], lambda t: t.clamp(-0.5, 0.7),
         attrs={"min": -0.5, "max": 0.7, "has_min": True, "has_max": True})
    case(w, "clamp/f32/min_only", "clamp", [randn(g, 4, 7)], lambda t: t.clamp(min=0.1),
         attrs={"min": 0.1, "max": 0.0, "has_min": True, "has_max": False})
    case(w, "cast/f32_to_f64", "cast", [randn(g, 3, 4)], lambda t: t.to(torch.float64),
         attrs={"dtype": "f64"}, keep64=True)
    case(w, "contiguous/f32/transposed", "contiguous",
         [View(randn(g, 4, 6), [{"op": "transpose", "dim0": 0, "dim1": 1}])],
         lambda t: t.contiguous())

    # ---- binary, broadcasting ----
    for op, fn in [("add", torch.add), ("sub", torch.sub), ("mul", torch.mul),
                   ("div", torch.div)]:
        b = pos(3, 1) if op == "div" else randn(g, 3, 1)
        case(w, f"{op}/f32/broadcast", op, [randn(g, 2, 3, 5), b], fn)
        case(w, f"{op}/f32/same", op, [randn(g, 4, 5), pos(4, 5)], fn)
    case(w, "add/f32/scalar_rhs", "add", [randn(g, 3, 4), randn(g)], torch.add)
    case(w, "add/f32/rhs_no_grad", "add", [randn(g, 3, 4), randn(g, 4)], torch.add,
         wanted=[True, False])
    case(w, "mul/f32/self", "mul", [randn(g, 3, 4), randn(g, 3, 4)],
         lambda a, b: a * a, wanted=[True, False], alias=[-1, 0])
    case(w, "pow/f32", "pow", [pos(3, 4), randn(g, 3, 4)], torch.pow)
    a = randn(g, 3, 4)
    b = randn(g, 3, 4)
    b[0, :2] = a[0, :2]  # ties: torch gives each side half
    for op, fn in [("maximum", torch.maximum), ("minimum", torch.minimum)]:
        case(w, f"{op}/f32/ties", op, [a, b], fn)
        case(w, f"{op}/f32/broadcast", op, [randn(g, 2, 3, 4), randn(g, 4)], fn)
    case(w, "where/f32/broadcast", "where",
         [randn(g, 3, 4) > 0, randn(g, 3, 4), randn(g, 4)], torch.where)

    # ---- reductions and softmax ----
    x = randn(g, 3, 4, 5)
    case(w, "sum/f32/dim1", "sum", [x], lambda t: t.sum(1), attrs={"dims": [1], "keepdim": False})
    case(w, "sum/f32/all", "sum", [x], lambda t: t.sum(), attrs={"dims": [], "keepdim": False})
    case(w, "mean/f32/dims02_keep", "mean", [x], lambda t: t.mean((0, 2), keepdim=True),
         attrs={"dims": [0, 2], "keepdim": True})
    case(w, "mean/f32/last", "mean", [x], lambda t: t.mean(-1),
         attrs={"dims": [-1], "keepdim": False})
    xt = x.clone()
    xt[0, 1, 2] = xt[0, 1, 4] = xt[0, 1].max() + 1  # a tie for the maximum
    case(w, "max/f32/dim2_ties", "max", [xt], lambda t: t.amax(2),
         attrs={"dims": [2], "keepdim": False})
    case(w, "max/f32/all", "max", [x], lambda t: t.amax(), attrs={"dims": [], "keepdim": False})
    case(w, "min/f32/dims01_keep", "min", [x], lambda t: t.amin((0, 1), keepdim=True),
         attrs={"dims": [0, 1], "keepdim": True})
    case(w, "var/f32/last", "var", [x], lambda t: t.var(-1),
         attrs={"dims": [-1], "keepdim": False, "correction": 1})
    case(w, "var/f32/all_biased", "var", [x], lambda t: t.var(correction=0),
         attrs={"dims": [], "keepdim": False, "correction": 0})
    case(w, "softmax/f32/last", "softmax", [x * 2], lambda t: t.softmax(-1), attrs={"dim": -1})
    case(w, "softmax/f32/dim1", "softmax", [x], lambda t: t.softmax(1), attrs={"dim": 1})
    case(w, "log_softmax/f32/last", "log_softmax", [x * 2], lambda t: t.log_softmax(-1),
         attrs={"dim": -1})
    case(w, "log_softmax/f32/dim0", "log_softmax", [x], lambda t: t.log_softmax(0),
         attrs={"dim": 0})

    # ---- linear algebra ----
    mm = [("2d", (3, 4), (4, 5)), ("batch", (2, 3, 4), (2, 4, 5)),
          ("batch_bcast", (2, 1, 3, 4), (3, 4, 2)), ("vec_mat", (4,), (4, 5)),
          ("mat_vec", (3, 4), (4,)), ("vec_vec", (4,), (4,))]
    for tag, sa, sb in mm:
        case(w, f"matmul/f32/{tag}", "matmul", [randn(g, *sa), randn(g, *sb)], torch.matmul)
    case(w, "matmul/f32/transposed_rhs", "matmul",
         [randn(g, 3, 4), View(randn(g, 5, 4), [{"op": "transpose", "dim0": 0, "dim1": 1}])],
         torch.matmul)
    case(w, "linear/f32/bias", "linear", [randn(g, 2, 3, 4), randn(g, 5, 4), randn(g, 5)], F.linear)
    case(w, "linear/f32/no_bias", "linear", [randn(g, 3, 4), randn(g, 5, 4), None],
         lambda x, wt, b: F.linear(x, wt))

    # ---- normalisation ----
    x = randn(g, 2, 3, 8) * 2 + 0.3
    rms = lambda t, wt, eps, unit: (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + eps)) * \
        ((1 + wt) if unit else (wt if wt is not None else 1))  # noqa: E731
    case(w, "rms_norm/f32/weight", "rms_norm", [x, randn(g, 8)],
         lambda t, wt: rms(t, wt, 1e-6, False), attrs={"eps": 1e-6, "unit_offset": False})
    case(w, "rms_norm/f32/unit_offset", "rms_norm", [x, randn(g, 8)],
         lambda t, wt: rms(t, wt, 1e-6, True), attrs={"eps": 1e-6, "unit_offset": True})
    case(w, "rms_norm/f32/no_weight", "rms_norm", [x, None],
         lambda t, wt: rms(t, None, 1e-5, False), attrs={"eps": 1e-5, "unit_offset": False})
    case(w, "layer_norm/f32/affine", "layer_norm", [x, randn(g, 8), randn(g, 8)],
         lambda t, wt, b: F.layer_norm(t, (8,), wt, b, 1e-5), attrs={"eps": 1e-5})
    case(w, "layer_norm/f32/plain", "layer_norm", [x, None, None],
         lambda t, wt, b: F.layer_norm(t, (8,), None, None, 1e-5), attrs={"eps": 1e-5})

    # ---- transformer ----
    case(w, "rope/f32/full", "rope", [randn(g, 2, 3, 5, 8), randn(g, 2, 5, 8), randn(g, 2, 5, 8)],
         rope_ref)
    case(w, "rope/f32/partial_b1", "rope",
         [randn(g, 2, 3, 5, 8), randn(g, 1, 5, 4), randn(g, 1, 5, 4)], rope_ref)
    case(w, "rope/f32/x_only", "rope",
         [randn(g, 1, 2, 4, 6), randn(g, 1, 4, 6), randn(g, 1, 4, 6)], rope_ref,
         wanted=[True, False, False])
    sd = [("causal_gqa", (1, 4, 5, 8), (1, 2, 5, 8), None, 0.0, True, 0, 0.0),
          ("plain_mha", (2, 2, 4, 8), (2, 2, 6, 8), None, 0.0, False, 0, 0.0),
          ("decode_causal", (1, 2, 2, 4), (1, 1, 7, 4), None, 0.3, True, 0, 0.0),
          ("window", (1, 2, 6, 4), (1, 2, 6, 4), None, 0.0, True, 3, 0.0),
          ("softcap", (1, 2, 5, 4), (1, 1, 5, 4), None, 0.25, True, 0, 5.0),
          ("bool_mask", (2, 2, 4, 4), (2, 2, 4, 4), "bool", 0.0, False, 0, 0.0),
          ("float_mask", (1, 2, 4, 4), (1, 2, 4, 4), "float", 0.0, False, 0, 0.0),
          ("masked_row", (1, 1, 3, 4), (1, 1, 3, 4), "empty_row", 0.0, False, 0, 0.0)]
    for tag, qs, ks, mk, scale, causal, window, cap in sd:
        q, k, v = randn(g, *qs), randn(g, *ks), randn(g, *ks)
        tq, tk = qs[2], ks[2]
        mask = None
        if mk == "bool":
            mask = randn(g, qs[0], 1, tq, tk) > -0.5
            mask[..., 0] = True
        elif mk == "float":
            mask = randn(g, 1, 1, tq, tk)
        elif mk == "empty_row":
            mask = torch.ones(1, 1, tq, tk, dtype=torch.bool)
            mask[0, 0, 1] = False
        attrs = {"scale": scale, "causal": causal, "window": window, "softcap": cap}
        case(w, f"sdpa/f32/{tag}", "sdpa", [q, k, v, mask],
             lambda q_, k_, v_, m_: sdpa_ref(q_, k_, v_, m_, scale, causal, window, cap),
             attrs=attrs)
    case(w, "embedding/f32/repeats", "embedding",
         [randn(g, 10, 6), torch.tensor([[1, 3, 3, 9], [0, 1, 3, 7]])],
         lambda wt, ids: F.embedding(ids, wt))

    # ---- indexing, views, concatenation ----
    x = randn(g, 4, 5)
    case(w, "gather/f32/dim1", "gather", [x, randint(g, 0, 5, 4, 3)],
         lambda t, i: torch.gather(t, 1, i), attrs={"dim": 1})
    case(w, "index_select/f32/dim0_repeats", "index_select", [x, torch.tensor([3, 0, 3, 1])],
         lambda t, i: torch.index_select(t, 0, i), attrs={"dim": 0})
    case(w, "scatter_add/f32/dim1", "scatter_add",
         [randn(g, 4, 5), randint(g, 0, 5, 4, 3), randn(g, 4, 3)],
         lambda t, i, s_: torch.scatter_add(t, 1, i, s_), attrs={"dim": 1})
    case(w, "index_add/f32/alpha", "index_add",
         [randn(g, 4, 5), torch.tensor([2, 0, 2]), randn(g, 3, 5)],
         lambda t, i, s_: torch.index_add(t, 0, i, s_, alpha=0.5), attrs={"dim": 0, "alpha": 0.5})
    case(w, "topk/f32/largest", "topk", [randn(g, 3, 6)],
         lambda t: torch.topk(t, 3, dim=1)[0],
         attrs={"k": 3, "dim": 1, "largest": True, "sorted": True})
    case(w, "sort/f32/descending", "sort", [randn(g, 4, 5)],
         lambda t: torch.sort(t, dim=0, descending=True, stable=True)[0],
         attrs={"dim": 0, "descending": True})
    case(w, "repeat_interleave/f32/dim1", "repeat_interleave", [randn(g, 2, 3, 2)],
         lambda t: t.repeat_interleave(3, dim=1), attrs={"repeats": 3, "dim": 1})
    x = randn(g, 2, 3, 4)
    case(w, "reshape/f32", "reshape", [x], lambda t: t.reshape(6, 4), attrs={"shape": [6, 4]})
    case(w, "reshape/f32/copying", "reshape",
         [View(randn(g, 4, 6), [{"op": "transpose", "dim0": 0, "dim1": 1}])],
         lambda t: t.reshape(24), attrs={"shape": [24]})
    case(w, "view/f32", "view", [x], lambda t: t.view(2, 12), attrs={"shape": [2, 12]})
    case(w, "permute/f32", "permute", [x], lambda t: t.permute(2, 0, 1),
         attrs={"dims": [2, 0, 1]})
    case(w, "transpose/f32", "transpose", [x], lambda t: t.transpose(0, 2),
         attrs={"dim0": 0, "dim1": 2})
    case(w, "slice/f32/step2", "slice", [x], lambda t: t[:, :, 1::2],
         attrs={"dim": 2, "start": 1, "end": 4, "step": 2})
    case(w, "slice/f32/neg_start", "slice", [x], lambda t: t[:, -2:],
         attrs={"dim": 1, "start": -2, "end": 3, "step": 1})
    case(w, "expand/f32", "expand", [randn(g, 3, 1)], lambda t: t.expand(2, 3, 4),
         attrs={"shape": [2, 3, 4]})
    case(w, "squeeze/f32", "squeeze", [randn(g, 3, 1, 4)], lambda t: t.squeeze(1),
         attrs={"dims": [1], "all": False})
    case(w, "unsqueeze/f32", "unsqueeze", [x], lambda t: t.unsqueeze(1), attrs={"dim": 1})
    case(w, "split/f32/sizes", "split", [randn(g, 7, 3)], lambda t: t.split([2, 4, 1], 0),
         attrs={"dim": 0, "sizes": [2, 4, 1], "size": 0})
    case(w, "cat/f32/dim1", "cat", [randn(g, 2, 3), randn(g, 2, 1), randn(g, 2, 4)],
         lambda *t: torch.cat(t, 1), attrs={"dim": 1})
    case(w, "stack/f32/dim1", "stack", [randn(g, 2, 3), randn(g, 2, 3)],
         lambda *t: torch.stack(t, 1), attrs={"dim": 1})

    # ---- convolution, group norm, resampling (the diffusion UNet's ops) ----
    cv = [  # tag, x, w, bias, stride, padding, dilation, groups
        ("3x3_pad1_bias", (2, 3, 6, 5), (4, 3, 3, 3), True, (1, 1), (1, 1), (1, 1), 1),
        ("stride2_pad1_odd", (1, 4, 7, 7), (4, 4, 3, 3), True, (2, 2), (1, 1), (1, 1), 1),
        ("stride3_remainder", (2, 2, 8, 9), (3, 2, 2, 3), False, (3, 2), (0, 1), (1, 1), 1),
        ("dilated_groups2", (2, 4, 7, 6), (6, 2, 3, 2), True, (1, 2), (2, 0), (2, 1), 2),
        ("1x1_pad_gt_kernel", (1, 2, 4, 5), (3, 2, 1, 1), True, (2, 1), (1, 2), (1, 1), 1),
        ("depthwise", (1, 3, 5, 5), (6, 1, 3, 3), False, (1, 1), (1, 1), (1, 1), 3),
    ]
    for tag, xs, ws, bias, st, pd, dl, gr in cv:
        inp = [randn(g, *xs), randn(g, *ws) * 0.5, randn(g, ws[0]) if bias else None]
        case(w, f"conv2d/f32/{tag}", "conv2d", inp,
             lambda x_, w_, b_, st=st, pd=pd, dl=dl, gr=gr: F.conv2d(x_, w_, b_, st, pd, dl, gr),
             attrs={"stride": list(st), "padding": list(pd), "dilation": list(dl), "groups": gr})
    case(w, "group_norm/f32/affine_4d", "group_norm",
         [randn(g, 2, 6, 3, 4) * 2 + 0.5, randn(g, 6), randn(g, 6)],
         lambda x_, w_, b_: F.group_norm(x_, 3, w_, b_, 1e-5), attrs={"groups": 3, "eps": 1e-5})
    case(w, "group_norm/f32/plain_3d", "group_norm", [randn(g, 2, 4, 5), None, None],
         lambda x_, w_, b_: F.group_norm(x_, 2, None, None, 1e-6), attrs={"groups": 2, "eps": 1e-6})
    case(w, "group_norm/f32/one_group", "group_norm",
         [randn(g, 1, 4, 3, 3), randn(g, 4), randn(g, 4)],
         lambda x_, w_, b_: F.group_norm(x_, 1, w_, b_, 1e-5), attrs={"groups": 1, "eps": 1e-5})
    for tag, xs, size in [("2x", (1, 2, 3, 4), (6, 8)), ("uneven", (2, 1, 3, 5), (7, 4))]:
        case(w, f"upsample_nearest/f32/{tag}", "upsample_nearest", [randn(g, *xs)],
             lambda x_, size=size: F.interpolate(x_, size=size, mode="nearest"),
             attrs={"size": list(size)})
    for tag, xs, size, ac in [("up", (1, 2, 3, 4), (5, 9), False),
                              ("down", (2, 1, 6, 5), (4, 3), False),
                              ("align_corners", (1, 2, 3, 4), (7, 6), True)]:
        case(w, f"upsample_bilinear/f32/{tag}", "upsample_bilinear", [randn(g, *xs)],
             lambda x_, size=size, ac=ac: F.interpolate(x_, size=size, mode="bilinear",
                                                        align_corners=ac),
             attrs={"size": list(size), "align_corners": ac})

    pools = [("2x2", (2, 3, 6, 4), (2, 2), (2, 2), (0, 0), False, True),
             ("pad_ceil_exclude", (1, 2, 7, 6), (3, 2), (2, 2), (1, 1), True, False),
             ("pad_include", (1, 1, 5, 7), (3, 3), (2, 3), (1, 1), False, True)]
    for tag, xs, k, st, pd, ceil, inc in pools:
        case(w, f"avg_pool2d/f32/{tag}", "avg_pool2d", [randn(g, *xs)],
             lambda x_, k=k, st=st, pd=pd, ceil=ceil, inc=inc:
             F.avg_pool2d(x_, k, st, pd, ceil, inc),
             attrs={"kernel": list(k), "stride": list(st), "padding": list(pd),
                    "ceil_mode": ceil, "count_include_pad": inc})

    # ---- mixture of experts ----
    gs = torch.tensor([3, 0, 5], dtype=torch.int32)
    case(w, "ragged_dot/f32/kn", "ragged_dot", [randn(g, 10, 6), randn(g, 3, 6, 4), gs],
         lambda x_, w_, s_: ragged_ref(x_, w_, s_, False), attrs={"rhs_nk": False})
    case(w, "ragged_dot/f32/nk", "ragged_dot", [randn(g, 10, 6), randn(g, 3, 4, 6), gs],
         lambda x_, w_, s_: ragged_ref(x_, w_, s_, True), attrs={"rhs_nk": True})

    # ---- losses (not table ops: the runner calls em_cross_entropy) ----
    labels = torch.tensor([2, -100, 0, 6, -100, 3])
    case(w, "cross_entropy/f32/ignore", "cross_entropy", [randn(g, 6, 7) * 2, labels],
         lambda lg, lb: F.cross_entropy(lg, lb, ignore_index=-100), attrs={"ignore_index": -100})
    case(w, "cross_entropy/f32/all_rows", "cross_entropy",
         [randn(g, 5, 9), torch.tensor([8, 0, 4, 4, 1], dtype=torch.int32)],
         lambda lg, lb: F.cross_entropy(lg, lb.long()), attrs={"ignore_index": -100})


def build_sdpa_lse(w):
    """sdpa_lse: the loss sum(out * w1) + sum(lse * w2) (w1, w2 the random upstream gradients
    of run()), in float64 from the inputs' values. The bf16 case (inputs bf16, output f32, as
    the ring calls it) compares bf16 gradients (Ember's f32 gradient rounded once to bf16,
    torch's float64 one rounded once): 1e-2 (a bf16 ulp is 2^-7 relative) instead of 1e-5. Its own generator, so the cases above keep
    their bytes."""
    g = gen(23)
    sl = [  # tag, q, kv, mask, scale, causal, window, softcap, dtype
        ("gqa2", (1, 4, 5, 8), (1, 2, 6, 8), None, 0.0, False, 0, 0.0, torch.float32),
        ("causal", (2, 2, 6, 4), (2, 2, 6, 4), None, 0.0, True, 0, 0.0, torch.float32),
        ("float_mask", (1, 2, 4, 4), (1, 2, 5, 4), "float", 0.0, False, 0, 0.0, torch.float32),
        ("softcap_window", (1, 2, 6, 4), (1, 1, 6, 4), None, 0.3, True, 3, 5.0, torch.float32),
        ("empty_row", (1, 2, 3, 4), (1, 2, 4, 4), "empty_row", 0.0, False, 0, 0.0,
         torch.float32),
        ("bf16_in_gqa2_causal", (1, 4, 5, 8), (1, 2, 5, 8), None, 0.0, True, 0, 0.0,
         torch.bfloat16),
    ]
    for tag, qs, ks, mk, scale, causal, window, cap, dt in sl:
        q, k, v = (randn(g, *qs).to(dt), randn(g, *ks).to(dt), randn(g, *ks).to(dt))
        tq, tk = qs[2], ks[2]
        mask = None
        if mk == "float":
            mask = randn(g, 1, 1, tq, tk)
        elif mk == "empty_row":
            mask = torch.ones(1, 1, tq, tk, dtype=torch.bool)
            mask[0, 0, 1] = False
        attrs = {"scale": scale, "causal": causal, "window": window, "softcap": cap,
                 "dtype": "f32"}
        name = f"sdpa_lse/{'bf16' if dt == torch.bfloat16 else 'f32'}/{tag}"
        case(w, name, "sdpa_lse", [q, k, v, mask],
             lambda q_, k_, v_, m_, scale=scale, causal=causal, window=window, cap=cap:
             sdpa_lse_ref(q_, k_, v_, m_, scale, causal, window, cap),
             attrs=attrs, atol=2e-5 if dt == torch.bfloat16 else 1e-5,
             rtol=2e-5 if dt == torch.bfloat16 else 1e-5)
        if dt == torch.bfloat16:
            w.cases[-1]["grad_atol"] = w.cases[-1]["grad_rtol"] = 1e-2


def main():
    w = Writer("grad", OUT)
    build(w)
    build_sdpa_lse(w)
    n, size = w.write()
    print(f"grad: {n} cases, {size} bytes")


if __name__ == "__main__":
    main()
