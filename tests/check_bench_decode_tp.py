#!/usr/bin/env python3
"""`ember bench decode --tp 2`: the collectives of a tensor-parallel decode step, counted.

Usage: check_bench_decode_tp.py xla|MPIEXEC|none EMBER [ARGS...]
  xla       the ranks are two devices of XLA's CPU plugin in one process (exits 77, skipped,
            without the plugin)
  MPIEXEC   mpirun: the ranks are two processes on the CPU (`none`: built without MPI, skipped)
Checks, from the --json rows, on the tiny test checkpoints (f32): a decode step calls 2 L + 2
collectives (an all_reduce of the vocab-parallel embedding's rows, an all_reduce after o_proj
and one after the MLP or MoE block per layer, the LM head's all_gather), and each rank hands
them exactly (2 L + 1) B H x 4 bytes (all_reduce of the [B, 1, H] partial sums) plus
B (V / 2) x 4 bytes (all_gather of its logits' half); dense,
and MoE by expert parallelism and by moe_tp_experts; the time share within [0, 1]. No timing is
asserted. Needs only the Python standard library.
"""
import json
import os
import subprocess
import sys


def fail(msg):
    sys.exit("FAIL: " + msg)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    mode, ember = sys.argv[1], sys.argv[2:]
    fixtures = os.environ.get("EMBER_FIXTURES") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "fixtures")
    env = dict(os.environ)
    if mode == "none":
        print("SKIPPED: Ember was built without MPI (EMBER_MPI=OFF)")
        sys.exit(77)
    if mode == "xla":
        env.setdefault("EMBER_PJRT_OPTIONS", "cpu_device_count=2")
        launch, dev = ember, ["--device", "xla"]
        cases = [("qwen3", [], [1, 3]), ("qwen3_moe", ["--ep"], [2])]
    else:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        launch, dev = [mode, "--oversubscribe", "--timeout", "300", "-np", "2"] + ember, []
        cases = [("llama", [], [1, 2]), ("qwen3_moe", [], [2])]
    for fam, extra, batches in cases:
        model = os.path.join(fixtures, "models", fam)
        cfg = json.load(open(os.path.join(model, "config.json")))
        L, H, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]
        cmd = launch + ["bench", "decode", "--tp", "2", "--model", model, "--steps", "2",
                        "--batches", ",".join(map(str, batches)), "--json"] + dev + extra
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        if mode == "xla" and "no device named" in r.stderr:
            print("SKIPPED: no XLA PJRT plugin (install xla-cpu-pjrt or set EMBER_PJRT_XLA_PLUGIN)")
            sys.exit(77)
        if r.returncode != 0:
            fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-3000:]}")
        rows = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
        rows = [x for x in rows if x.get("bench") == "decode_tp"]
        if [x["batch"] for x in rows] != batches:
            fail(f"{fam}: rows for batches {[x['batch'] for x in rows]}, want {batches} "
                 f"(one rank prints):\n{r.stdout}")
        for x in rows:
            b = x["batch"]
            ar, ag = (2 * L + 1) * b * H * 4, b * (V // 2) * 4
            if x["collectives_per_step"] != 2 * L + 2:
                fail(f"{fam} batch {b}: {x['collectives_per_step']} collectives per step, "
                     f"want {2 * L + 2}")
            if (x["all_reduce_bytes_per_step"], x["all_gather_bytes_per_step"]) != (ar, ag) or \
                    x["collective_bytes_per_step"] != ar + ag:
                fail(f"{fam} batch {b}: bytes {x}, want all_reduce {ar} + all_gather {ag}")
            if not (0 <= x["collective_share"] <= 1) or not x["tokens_per_s"] > 0:
                fail(f"{fam} batch {b}: share {x['collective_share']}, tokens/s "
                     f"{x['tokens_per_s']}")
            print(f"{mode} {fam}{' '.join([''] + extra)} batch {b}: {x['collectives_per_step']:.0f} "
                  f"collectives, {x['collective_bytes_per_step']:.0f} bytes per step per rank "
                  f"(as the plan implies), {100 * x['collective_share']:.1f} % of the step")
    print("ok")


if __name__ == "__main__":
    main()
