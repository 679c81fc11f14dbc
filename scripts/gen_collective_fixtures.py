#!/usr/bin/env python3
"""Generates tests/fixtures/dist/collectives.{json,bin}: per-rank inputs and expected per-rank
outputs of all_reduce, all_gather, reduce_scatter, all_to_all and ring_shift (a collective
permute: rank r gets rank (r - offset) mod N's tensor) for 2 and 4 ranks.

The references are numpy's (sum/max over the ranks, concatenate, split); bf16 values are rounded
from float32 by torch's cast (round to nearest even), the pinned torch of
scripts/requirements-fixtures.txt. bf16 sums use inputs k/16 (|k| < 128: exactly representable)
so that every float32 partial sum is exact whatever order MPI adds in: the only rounding is the
final one to bf16, and the expected values are exact. float32 sums are compared with a tolerance
(MPI's order of addition is its own).

Usage: /opt/refvenv/bin/python scripts/gen_collective_fixtures.py
"""
import json
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "dist")


def to_bf16_bits(a):
    t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def from_bf16_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


class Writer:
    def __init__(self):
        self.blob = bytearray()
        self.cases = []

    def add(self, arr, dtype):
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        raw = to_bf16_bits(arr).tobytes() if dtype == "bf16" else arr.tobytes()
        while len(self.blob) % 64:
            self.blob.append(0)
        off = len(self.blob)
        self.blob += raw
        return {"offset": off, "nbytes": len(raw)}


def inputs(rng, world, shape, dtype, summing):
    xs = []
    for _ in range(world):
        if dtype == "bf16" and summing:
            x = rng.integers(-127, 128, size=shape).astype(np.float32) / 16
        else:
            x = rng.standard_normal(shape).astype(np.float32)
            if dtype == "bf16":
                x = from_bf16_bits(to_bf16_bits(x))  # the values a bf16 tensor holds
        xs.append(x)
    return xs


def reduce(xs, how):
    if how == "sum":
        return np.sum(np.stack(xs).astype(np.float64), axis=0).astype(np.float32)
    return np.max(np.stack(xs), axis=0)


def main():
    rng = np.random.default_rng(18)
    w = Writer()

    def case(name, op, world, dtype, shape, outs, xs, **attrs):
        c = {"name": name, "op": op, "world": world, "dtype": dtype, "shape": list(shape),
             "out_shape": list(outs[0].shape),
             "inputs": [w.add(x, dtype) for x in xs],
             "outputs": [w.add(o, dtype) for o in outs],
             "atol": 1e-5 if dtype == "f32" else 0.0, "rtol": 1e-6 if dtype == "f32" else 0.0}
        c.update(attrs)
        w.cases.append(c)

    for world in (2, 4):
        for dtype in ("f32", "bf16"):
            for how in ("sum", "max"):
                for shape in ((3, 5), (2, 3, 8)):
                    xs = inputs(rng, world, shape, dtype, how == "sum")
                    r = reduce(xs, how)
                    case(f"all_reduce/{how}/{dtype}/w{world}/{len(shape)}d", "all_reduce", world,
                         dtype, shape, [r] * world, xs, reduce=how)
                    for dim in range(len(shape)):
                        if shape[dim] % world:
                            continue
                        parts = np.split(r, world, axis=dim)
                        case(f"reduce_scatter/{how}/{dtype}/w{world}/{len(shape)}d/dim{dim}",
                             "reduce_scatter", world, dtype, shape, parts, xs, reduce=how, dim=dim)
            for shape in ((3, 5), (2, 3, 4)):
                xs = inputs(rng, world, shape, dtype, False)
                for dim in range(len(shape)):
                    g = np.concatenate(xs, axis=dim)
                    case(f"all_gather/{dtype}/w{world}/{len(shape)}d/dim{dim}", "all_gather",
                         world, dtype, shape, [g] * world, xs, dim=dim)
            shape = (4, 8, 2)
            xs = inputs(rng, world, shape, dtype, False)
            for sd, cd in ((1, 0), (0, 1), (1, 1), (0, 2)):
                outs = [np.concatenate([np.split(xs[i], world, axis=sd)[r] for i in range(world)],
                                       axis=cd) for r in range(world)]
                case(f"all_to_all/{dtype}/w{world}/split{sd}/concat{cd}", "all_to_all", world,
                     dtype, shape, outs, xs, split_dim=sd, concat_dim=cd)

    # ring_shift (drawn from a generator of its own: the cases above keep their values)
    rng = np.random.default_rng(20)
    for world in (2, 4):
        for dtype in ("f32", "bf16"):
            shape = (2, 3, 4)
            xs = inputs(rng, world, shape, dtype, False)
            for off in (1, -1, 2, world + 1):
                outs = [xs[(r - off) % world] for r in range(world)]
                case(f"ring_shift/{dtype}/w{world}/offset{off}", "ring_shift", world, dtype,
                     shape, outs, xs, offset=off)

    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "collectives.bin"), "wb") as f:
        f.write(w.blob)
    doc = {"version": 1, "generator": "scripts/gen_collective_fixtures.py",
           "numpy": np.__version__, "torch": torch.__version__, "cases": w.cases}
    with open(os.path.join(OUT, "collectives.json"), "w") as f:
        json.dump(doc, f, indent=0)
        f.write("\n")
    print(f"{len(w.cases)} cases, {len(w.blob)} bytes")


if __name__ == "__main__":
    main()
