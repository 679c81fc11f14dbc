"""`ember image --cp 4 --cp-ring 2 --cp-ulysses 2` on the tiny DiTPipeline
(tests/fixtures/diffusion/dit_pipe): diffusers' unified context parallelism (Ulysses inside
ranks {0, 1} and {2, 3}, the ring across {0, 2} and {1, 3}); and `--tp 2 --cp 2` (tensor
parallelism inside {0, 1} and {2, 3}, context parallelism across them). Each under mpirun -np 4
(MPIEXEC "none": skipped), and over 4 devices of XLA's CPU plugin in one process (skipped
without the plugin): the first eager (about 10 s with a cold compile cache; the second, whose
groups are the same kind, is left to mpirun) and both --compile'd (one program over the 4
devices whose collectives run over the two sub-groups, one 'compile mode: 1 program(s)' line;
about 1 s more once the eager run has filled the cache). The image must be the one-process
run's within 1e-5 and diffusers' (dit_runs_ref's "cfg") within 1e-3, with the placement lines
(rank 0's). Then the refusals: degrees whose product is not --cp, one degree without the other.

Usage: check_image_cp_hybrid.py MPIEXEC EMBER
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_image import bundle, fail, read_npy  # noqa: E402

SKIP = 77
RUN = ["--class-label", "7", "--guidance", "4", "--steps", "6", "--seed", "0"]
HYBRID = ["--cp", "4", "--cp-ring", "2", "--cp-ulysses", "2"]
TP_CP = ["--tp", "2", "--cp", "2"]
PLACED = {
    "--cp-ring": ["context parallelism: degree 4, each rank 1/4 of the image's tokens, ring 2 x "
                  "ulysses 2 attention"],
    "--tp": ["context parallelism: degree 2, each rank 1/2 of the image's tokens, ring attention",
             "tensor parallelism: degree 2, per rank and block 1 of 2 attention heads"],
}


def fixtures_dir():
    return os.environ.get("EMBER_FIXTURES") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "fixtures")


def image(cmd, out_npy, extra):
    args = ["image", "--model", os.path.join(fixtures_dir(), "diffusion", "dit_pipe")] + RUN + [
        "--out", out_npy[:-4] + ".png", "--out-npy", out_npy] + extra
    return subprocess.run(cmd + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, EMBER_PJRT_OPTIONS="cpu_device_count=4"))


def one_process(ember, tmp):
    """The image of one process (no split): the values every split run must give."""
    one = os.path.join(tmp, "one.npy")
    r = image(ember, one, [])
    if r.returncode != 0 and "no PNG support" not in r.stderr:
        fail("one process: exit %d:\n%s" % (r.returncode, r.stderr))
    return read_npy(one)[1]


def check(name, r, npy, whole, want):
    if r.returncode != 0 and "no PNG support" not in r.stderr:
        fail("%s: exit %d:\n%s" % (name, r.returncode, r.stderr))
    got = read_npy(npy)[1]
    err1 = max(abs(a - b) for a, b in zip(got, whole))
    err2 = max(abs(a - b) for a, b in zip(got, want))
    if err1 > 1e-5 or err2 > 1e-3:
        fail("%s: max |split - one process| = %g, |split - diffusers| = %g" % (name, err1, err2))
    for line in PLACED["--tp" if "--tp" in name else "--cp-ring"]:
        if len([ln for ln in r.stderr.splitlines() if ln.startswith(line)]) != 1:
            fail("%s: want one line '%s' (rank 0's):\n%s" % (name, line, r.stderr))
    print("%s: max |split - one process| = %.2g, |split - diffusers| = %.2g" % (name, err1, err2))


def refused(ember, tmp):
    npy = os.path.join(tmp, "bad.npy")
    for extra in (["--cp", "4", "--cp-ring", "3", "--cp-ulysses", "2"],
                  ["--cp", "4", "--cp-ring", "2"]):
        r = image(ember, npy, extra)
        if r.returncode != 2 or "give both, with --cp their product" not in r.stderr:
            fail("%s: exit %d (want 2):\n%s" % (" ".join(extra), r.returncode, r.stderr))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    mpiexec, ember = sys.argv[1], sys.argv[2:]
    want = bundle(fixtures_dir(), "dit_runs_ref")["cfg_image"][1]
    ran = 0
    with tempfile.TemporaryDirectory() as tmp:
        whole = one_process(ember, tmp)
        refused(ember, tmp)
        for split in (HYBRID, TP_CP):
            if mpiexec != "none":
                npy = os.path.join(tmp, "mpi.npy")
                r = image([mpiexec, "--oversubscribe", "--timeout", "120", "-np", "4"] + ember,
                          npy, split)
                check("mpirun -np 4, " + " ".join(split), r, npy, whole, want)
                ran += 1
            else:
                print("SKIPPED (loudly): under mpirun: Ember was built without MPI")
            modes = [[], ["--compile"]] if split is HYBRID else [["--compile"]]
            for mode in modes:
                npy = os.path.join(tmp, "xla.npy")
                r = image(ember, npy, split + ["--device", "xla"] + mode)
                if r.returncode != 0 and ("no device named" in r.stderr or
                                          "xla-cpu-pjrt" in r.stderr):
                    print("SKIPPED (loudly): --device xla: no XLA plugin (pip install "
                          "xla-cpu-pjrt, or set EMBER_PJRT_XLA_PLUGIN)")
                    break
                name = "--device xla " + " ".join(split + mode) + " (a device group)"
                check(name, r, npy, whole, want)
                if mode and r.stderr.count("compile mode: 1 program(s)") != 1:
                    fail("%s: want one 'compile mode: 1 program(s)' line (rank 0's):\n%s" %
                         (name, r.stderr))
                ran += 1
    sys.exit(0 if ran else SKIP)


if __name__ == "__main__":
    main()
