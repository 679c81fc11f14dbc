"""Peer measurements for `ember bench ops`: torch eager on the CPU, same shapes, same run.

Reads a JSON list of tasks on stdin and prints one JSON object per task on stdout:
{"name": ..., "ms": median milliseconds} (or "error"). Exits 3 when torch is not importable.
"""
import json
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except Exception as e:  # noqa: BLE001
    print(json.dumps({"unavailable": str(e)}))
    sys.exit(3)

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def timeit(fn, min_time, inner=1):
    fn()
    times = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - t0) / inner)
        if time.perf_counter() - start > min_time and len(times) >= 3:
            break
    times.sort()
    return times[len(times) // 2] * 1e3


def run(task):
    kind = task["kind"]
    mt = task.get("min_time", 0.3)
    if kind == "dispatch":
        a = torch.ones(1)
        b = torch.ones(1)
        return timeit(lambda: a + b, mt, inner=1000)
    if kind == "ew":
        n = task["n"]
        dt = DT[task["dtype"]]
        a = torch.randn(n).to(dt)
        b = torch.randn(n).to(dt)
        op = task["op"]
        f = {"add": lambda: a + b, "mul": lambda: a * b, "silu": lambda: F.silu(a),
             "sum": lambda: a.sum(), "max": lambda: a.max()}[op]
        return timeit(f, mt)
    if kind == "matmul":
        m, k, n = task["m"], task["k"], task["n"]
        dt = DT[task["dtype"]]
        a = torch.randn(m, k).to(dt)
        b = torch.randn(k, n).to(dt)
        return timeit(lambda: a @ b, mt)
    if kind == "linear":
        m, k, n = task["m"], task["k"], task["n"]
        dt = DT[task["dtype"]]
        copies = task.get("copies", 1)
        x = torch.randn(m, k).to(dt)
        ws = [torch.randn(n, k).to(dt) for _ in range(copies)]
        state = {"i": 0}

        def f():
            w = ws[state["i"] % copies]
            state["i"] += 1
            return F.linear(x, w)

        return timeit(f, mt)
    raise ValueError(kind)


def main():
    tasks = json.load(sys.stdin)
    threads = int(tasks[0].get("threads", 0)) if tasks else 0
    if threads > 0:
        torch.set_num_threads(threads)
    for t in tasks:
        try:
            ms = run(t)
            print(json.dumps({"name": t["name"], "ms": ms}), flush=True)
        except Exception as e:  # noqa: BLE001
            print(json.dumps({"name": t["name"], "error": str(e)}), flush=True)


if __name__ == "__main__":
    main()
