"""`ember image --tp 2` on the tiny DiTPipeline (tests/fixtures/diffusion/dit_pipe): the
transformer's heads and feed-forward split over the 2 ranks of mpirun (MPIEXEC "none": skipped),
and over 2 devices of XLA's CPU plugin in one process, eager and --compile (skipped without the
plugin); and `--cp 2` (its image tokens split; ring attention, and `--cp-schedule all-gather`
and `ulysses`) under mpirun, and over the 2 XLA devices: the ring eager
(stablehlo.collective_permute) and every schedule --compile'd (one program for both devices).
Then `--tp 2` on the tiny StableDiffusion3Pipeline and FluxPipeline (sd3_tiny, flux_tiny: their
joint and single-stream blocks split the same way) under mpirun and over the 2 XLA devices
compiled, and `--cp 2` (their image tokens split, the text whole) under mpirun and over the 2
XLA devices compiled (ring and Ulysses). Each image must be
the one-process run's within 1e-5 and diffusers' (dit_runs_ref's "cfg", sd3_tiny_ref's "size",
flux_tiny_ref's "prompt2", the runs of check_image.py) within 1e-3; only rank 0 writes and
prints (one placement line, one progress line per step).

Usage: check_image_tp.py MPIEXEC EMBER
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_image import bundle, fail, read_npy  # noqa: E402

SKIP = 77


def fixtures_dir():
    return os.environ.get("EMBER_FIXTURES") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "fixtures")


# name, the run's arguments, its diffusers image (bundle, key), steps, the placement detail
DIT = ["--class-label", "7", "--guidance", "4", "--steps", "6", "--seed", "0"]
MMDIT = [
    ("sd3", ["--model", "sd3_tiny", "--prompt", "a dog in the snow", "--negative-prompt", "dark",
             "--guidance", "4", "--steps", "2", "--seed", "21", "--height", "16", "--width",
             "24"], ("sd3_tiny_ref", "size_image"), 2),
    ("flux", ["--model", "flux_tiny", "--prompt", "a red cube on a table", "--prompt-2",
              "a blue sphere", "--guidance", "5", "--steps", "3", "--seed", "5", "--height", "16",
              "--width", "16", "--max-sequence-length", "8"], ("flux_tiny_ref", "prompt2_image"),
     3),
]


def image(cmd, out_npy, extra, run=None):
    run = run or ["--model", "dit_pipe"] + DIT
    run = [os.path.join(fixtures_dir(), "diffusion", a) if i and run[i - 1] == "--model" else a
           for i, a in enumerate(run)]
    args = ["image"] + run + ["--out", out_npy[:-4] + ".png", "--out-npy", out_npy] + extra
    return subprocess.run(cmd + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, EMBER_PJRT_OPTIONS="cpu_device_count=2"))


def check(name, r, npy, whole, want, n_steps=6,
          detail="1 of 2 attention heads and 16 of 32"):
    if r.returncode != 0 and "no PNG support" not in r.stderr:
        fail("%s: exit %d:\n%s" % (name, r.returncode, r.stderr))
    _, got = read_npy(npy)
    err1 = max(abs(a - b) for a, b in zip(got, whole))
    err2 = max(abs(a - b) for a, b in zip(got, want))
    if err1 > 1e-5 or err2 > 1e-3:
        fail("%s: max |split - one process| = %g, |split - diffusers| = %g" % (name, err1, err2))
    lines = r.stderr.splitlines()
    cp = "--cp" in name
    placed = [ln for ln in lines if ln.startswith("%s parallelism: degree 2" % (
        "context" if cp else "tensor"))]
    steps = [ln for ln in lines if "s/step" in ln]
    if cp:
        detail = "1/2 of the image's tokens, %s attention" % (
            "all-gather" if "all-gather" in name else "ulysses" if "ulysses" in name else "ring")
    if len(placed) != 1 or detail not in placed[0] or len(steps) != n_steps:
        fail("%s: want one placement line (rank 0's) and %d progress lines:\n%s" %
             (name, n_steps, r.stderr))
    print("%s: max |split - one process| = %.2g, |split - diffusers| = %.2g" %
          (name, err1, err2))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    mpiexec, ember = sys.argv[1], sys.argv[2:]
    fixtures = fixtures_dir()
    want = bundle(fixtures, "dit_runs_ref")["cfg_image"][1]
    ran = 0
    with tempfile.TemporaryDirectory() as tmp:
        one = os.path.join(tmp, "one.npy")
        r = image(ember, one, [])
        if r.returncode != 0 and "no PNG support" not in r.stderr:
            fail("one process: exit %d:\n%s" % (r.returncode, r.stderr))
        whole = read_npy(one)[1]
        if mpiexec != "none":
            npy = os.path.join(tmp, "mpi.npy")
            r = image([mpiexec, "--oversubscribe", "--timeout", "120", "-np", "2"] + ember, npy,
                      ["--tp", "2"])
            check("mpirun -np 2, --tp 2", r, npy, whole, want)
            ran += 1
            r = image([mpiexec, "--oversubscribe", "--timeout", "120", "-np", "2"] + ember, npy,
                      ["--cp", "2"])
            check("mpirun -np 2, --cp 2", r, npy, whole, want)
            r = image([mpiexec, "--oversubscribe", "--timeout", "120", "-np", "2"] + ember, npy,
                      ["--cp", "2", "--cp-schedule", "all-gather"])
            check("mpirun -np 2, --cp 2 --cp-schedule all-gather", r, npy, whole, want)
            r = image([mpiexec, "--oversubscribe", "--timeout", "120", "-np", "2"] + ember, npy,
                      ["--cp", "2", "--cp-schedule", "ulysses"])
            check("mpirun -np 2, --cp 2 --cp-schedule ulysses", r, npy, whole, want)
            r = image(ember, npy, ["--cp", "2", "--tp", "2"])  # 4 ranks, one started
            if r.returncode != 2 or "launch with mpirun -np 4" not in r.stderr:
                fail("--cp 2 --tp 2: exit %d (want 2):\n%s" % (r.returncode, r.stderr))
        else:
            print("SKIPPED (loudly): --tp 2 under mpirun: Ember was built without MPI")
        for extra in ([], ["--compile"]):
            npy = os.path.join(tmp, "xla.npy")
            r = image(ember, npy, ["--tp", "2", "--device", "xla"] + extra)
            if r.returncode != 0 and ("no device named" in r.stderr or
                                      "xla-cpu-pjrt" in r.stderr):
                print("SKIPPED (loudly): --tp 2 --device xla: no XLA plugin (pip install "
                      "xla-cpu-pjrt, or set EMBER_PJRT_XLA_PLUGIN)")
                break
            check("--device xla --tp 2 (a device group)" + " ".join([""] + extra), r, npy,
                  whole, want)
            if extra and r.stderr.count("compile mode: 1 program(s)") != 1:
                fail("--compile: want one 'compile mode' line (rank 0's):\n" + r.stderr)
            # context parallelism over the device group: the ring's stablehlo.collective_permute;
            # compiled, one program for both devices, so the rank's share of the tokens is taken
            # by a collective, not a constant offset (every schedule)
            for sched in (["ring"] if not extra else ["ring", "all-gather", "ulysses"]):
                r = image(ember, npy, ["--cp", "2", "--cp-schedule", sched, "--device", "xla"] +
                          extra)
                check("--device xla --cp 2 --cp-schedule %s (a device group)%s" %
                      (sched, " ".join([""] + extra)), r, npy, whole, want)
                if extra and r.stderr.count("compile mode: 1 program(s)") != 1:
                    fail("--cp --compile: want one 'compile mode' line (rank 0's):\n" + r.stderr)
            ran += 1
        ran += mmdit(mpiexec, ember, tmp)
    sys.exit(0 if ran else SKIP)


def mmdit(mpiexec, ember, tmp):
    """--tp 2 on sd3_tiny and flux_tiny under mpirun (eager) and over 2 XLA devices (compiled);
    --cp 2 under mpirun"""
    ran = 0
    mpi = [mpiexec, "--oversubscribe", "--timeout", "120", "-np", "2"]
    detail = "1 of 2 attention heads and 32 of 64"
    for name, run, (ref, key), n_steps in MMDIT:
        want = bundle(fixtures_dir(), ref)[key][1]
        one = os.path.join(tmp, name + "_one.npy")
        r = image(ember, one, [], run)
        if r.returncode != 0 and "no PNG support" not in r.stderr:
            fail("%s one process: exit %d:\n%s" % (name, r.returncode, r.stderr))
        whole = read_npy(one)[1]
        npy = os.path.join(tmp, name + "_tp.npy")
        if mpiexec != "none":
            r = image(mpi + ember, npy, ["--tp", "2"], run)
            check("%s: mpirun -np 2, --tp 2" % name, r, npy, whole, want, n_steps, detail)
            r = image(mpi + ember, npy, ["--cp", "2"], run)
            check("%s: mpirun -np 2, --cp 2" % name, r, npy, whole, want, n_steps)
            ran += 1
        r = image(ember, npy, ["--tp", "2", "--device", "xla", "--compile"], run)
        if r.returncode != 0 and ("no device named" in r.stderr or "xla-cpu-pjrt" in r.stderr):
            print("SKIPPED (loudly): %s --tp 2 --device xla: no XLA plugin" % name)
            continue
        check("%s: --device xla --tp 2 --compile" % name, r, npy, whole, want, n_steps, detail)
        # context parallelism compiled over the devices: the text tokens whole, the image
        # tokens' share and their rows of the position tables (Flux's rotary cos/sin) taken by
        # a collective; Ulysses' heads of the text tokens too
        for sched in ("ring", "ulysses"):
            r = image(ember, npy, ["--cp", "2", "--cp-schedule", sched, "--device", "xla",
                                   "--compile"], run)
            check("%s: --device xla --cp 2 --cp-schedule %s --compile" % (name, sched), r, npy,
                  whole, want, n_steps)
        ran += 1
    return ran


if __name__ == "__main__":
    main()
