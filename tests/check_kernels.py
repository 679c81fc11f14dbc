#!/usr/bin/env python3
"""`ember kernels list/explain/lock` and `ember --kernels` against the test packages.

Usage: check_kernels.py PACKAGES_DIR [EMULATOR...] EMBER. PACKAGES_DIR holds the packages built
from kernels/test (tests/CMakeLists.txt). Exits 1 naming the first output that is not as expected.
"""
import json
import os
import subprocess
import sys
import tempfile

pkgs, ember = sys.argv[1], sys.argv[2:]
good = os.path.join(pkgs, "ember-test-kernels")
badabi = os.path.join(pkgs, "ember-test-badabi")
failures = 0


def run(*args, env=None, code=0):
    e = dict(os.environ)
    e.pop("EMBER_KERNELS", None)
    e.update(env or {})
    p = subprocess.run(ember + list(args), capture_output=True, text=True, env=e, timeout=60)
    if p.returncode != code:
        fail(f"{' '.join(args)}: exit {p.returncode}, expected {code}\n{p.stdout}{p.stderr}")
    return p.stdout, p.stderr


def fail(msg):
    global failures
    failures += 1
    print("FAIL:", msg, file=sys.stderr)


def expect(text, needle, what):
    if needle not in text:
        fail(f"{what}: {needle!r} not in:\n{text}")


out, _ = run("kernels", "list")
expect(out, "only the built-in kernels", "list without packages")
out, _ = run("kernels", "list", "--all")
expect(out, "silu", "list --all")
expect(out, "built-in *", "list --all")

out, err = run("--kernels", good, "kernels", "list")
expect(out, "silu_test *", "list with the package")
expect(out, "ember-test-kernels v1", "list with the package")
expect(out, "neg_wrong (disabled)", "list with the package")
expect(err, "kernel neg_wrong for neg from ember-test-kernels v1", "self-test message")
expect(err, "kernel sdpa_wrong for sdpa from ember-test-kernels v1", "self-test message")
expect(err, "the built-in is used", "self-test message")

out, _ = run("kernels", "list", env={"EMBER_KERNELS": good})
expect(out, "silu_test *", "EMBER_KERNELS")
out, _ = run("--kernels", "none", "kernels", "list", env={"EMBER_KERNELS": good})
expect(out, "only the built-in kernels", "--kernels none")

_, err = run("--kernels", "/nonexistent/pkg", "kernels", "list")
expect(err, "EMBER_KERNELS:", "a missing package")
expect(err, "the built-in kernels are used", "a missing package")

out, _ = run("kernels", "explain", good)
expect(out, "Accepted ember-abi1-cpu-generic-", "explain")
expect(out, ", chosen", "explain")
out, _ = run("kernels", "explain", badabi)  # its name says ABI 1: resolution accepts it
expect(out, "Accepted", "explain badabi")
out, err = run("--kernels", badabi, "kernels", "list")
expect(err, "ABI 2, Ember speaks 1", "loading badabi")

with tempfile.TemporaryDirectory() as d:
    lock = os.path.join(d, "ember-kernels.lock")
    out, _ = run("kernels", "lock", "-o", lock, good)
    expect(out, "wrote " + lock, "lock")
    doc = json.load(open(lock))
    entry = doc["kernels"][0]
    if doc["version"] != 1 or entry["commit"] != "local" or entry["repo"] != os.path.realpath(good):
        fail(f"lock content: {doc}")
    if not any(k.endswith("/libember_test_kernels.so") for k in entry["files"]):
        fail(f"lock files: {entry['files']}")

# download through the Hub client from the fake Hub (tests/hub_server.py), then load offline
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hub_server  # noqa: E402

files = {}
for root, _, names in os.walk(os.path.join(good, "build")):
    for n in names:
        full = os.path.join(root, n)
        files[os.path.relpath(full, good)] = open(full, "rb").read()
commit = hub_server.fake_commit("kernels-1")
hub_server.REPOS["ember-test/kernels"] = {"commits": {commit: files}, "refs": {"v1": commit}}
hub, _cdn = hub_server.start()
endpoint = "http://127.0.0.1:%d" % hub.server_address[1]
with tempfile.TemporaryDirectory() as cache:
    env = {"HF_ENDPOINT": endpoint, "HF_HUB_CACHE": cache, "HF_TOKEN": "", "HF_HUB_OFFLINE": "0"}
    out, _ = run("kernels", "download", "ember-test/kernels", env=env)
    expect(out, os.path.join("snapshots", commit), "download")
    # loading never asks the Hub: a dead endpoint, the cache answers
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"
    out, err = run("--kernels", "ember-test/kernels", "kernels", "list", env=env)
    expect(out, "silu_test *", "load from the cache")
    out, _ = run("kernels", "explain", "ember-test/kernels", env=env)
    expect(out, "ember-test/kernels at " + commit, "explain from the cache")
    out, err = run("--kernels", "ember-test/absent", "kernels", "list", env=env)
    expect(err, "the built-in kernels are used", "a package the cache lacks")
    if "127.0.0.1:9" in err:
        fail("loading used the network: " + err)

# Ember's AVX-512 BF16 ragged_dot package (kernels/ragged_avx512bf16, x86-64 builds): accepted
# and chosen where the kernels run AVX-512 BF16, rejected with the reason where they do not
bf16_pkg = os.path.join(pkgs, "ember-ragged-avx512bf16")
bf16_variant = "ember-abi1-cpu-avx512bf16-x86_64-linux"
if os.path.isdir(bf16_pkg):
    flags = set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    has_bf16 = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"} <= flags
    if has_bf16 and os.environ.get("EMBER_CPU_LEVEL", "") in ("", "avx512"):
        out, _ = run("kernels", "explain", bf16_pkg)
        expect(out, "Accepted " + bf16_variant + ": ember-ragged-avx512bf16 v1", "explain bf16")
        expect(out, ", chosen", "explain bf16")
        out, _ = run("--kernels", bf16_pkg, "kernels", "list")
        expect(out, "ragged_packed_avx512bf16 *", "list with the bf16 package")
        out, _ = run("kernels", "explain", bf16_pkg, env={"EMBER_CPU_LEVEL": "avx2"}, code=1)
        expect(out, "Rejected " + bf16_variant + ": needs AVX-512 BF16; this CPU runs AVX2",
               "explain bf16 at EMBER_CPU_LEVEL=avx2")
    else:
        print("note: no AVX-512 BF16 kernels here; ember-ragged-avx512bf16 is checked rejected")
        out, _ = run("kernels", "explain", bf16_pkg, code=1)
        expect(out, "Rejected " + bf16_variant + ": needs AVX-512 BF16", "explain bf16")

# removed, Ember falls back to the built-in and says which package it could not load: the
# library gone from a copy of the package, then the whole folder
if os.path.isdir(bf16_pkg):
    import shutil
    with tempfile.TemporaryDirectory() as d:
        copy = os.path.join(d, "ember-ragged-avx512bf16")
        shutil.copytree(bf16_pkg, copy)
        lib = os.path.join(copy, "build", bf16_variant, "libember_ragged_avx512bf16.so")
        if has_bf16 and os.environ.get("EMBER_CPU_LEVEL", "") in ("", "avx512"):
            out, _ = run("--kernels", copy, "kernels", "list")
            expect(out, "ragged_packed_avx512bf16 *", "the copied package")
            os.remove(lib)
            out, err = run("--kernels", copy, "kernels", "list")
            expect(err, "libember_ragged_avx512bf16.so is missing or unreadable", "library removed")
            expect(err, "the built-in kernels are used", "library removed")
            expect(out, "only the built-in kernels", "library removed")
        shutil.rmtree(copy)
        out, err = run("--kernels", copy, "kernels", "list")
        expect(err, copy, "package removed")
        expect(err, "the built-in kernels are used", "package removed")
        expect(out, "only the built-in kernels", "package removed")

# the attention package: chosen and listed where the kernels run AVX-512; its libraries removed
# from a copy, Ember says which files are missing and keeps the built-in
sdpa_pkg = os.path.join(pkgs, "ember-sdpa")
if os.path.isdir(sdpa_pkg):
    import shutil
    if os.environ.get("EMBER_CPU_LEVEL", "") in ("", "avx512", "avx512bf16") and \
            {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        out, _ = run("--kernels", sdpa_pkg, "kernels", "list")
        expect(out, "sdpa_flash_avx512 *", "list with ember-sdpa")
    with tempfile.TemporaryDirectory() as d:
        copy = os.path.join(d, "ember-sdpa")
        shutil.copytree(sdpa_pkg, copy)
        for v in os.listdir(os.path.join(copy, "build")):
            for f in os.listdir(os.path.join(copy, "build", v)):
                if f.endswith(".so"):
                    os.remove(os.path.join(copy, "build", v, f))
        out, err = run("--kernels", copy, "kernels", "list")
        expect(err, "libember_sdpa_avx2.so is missing or unreadable", "ember-sdpa libraries removed")
        expect(err, "the built-in kernels are used", "ember-sdpa libraries removed")
        expect(out, "only the built-in kernels", "ember-sdpa libraries removed")
    _, err = run("bench", "attention", "--kernels", "/nonexistent/pkg", code=1)
    expect(err, "--kernels /nonexistent/pkg", "bench attention --kernels with a missing package")

# `ember bench moe --kernels` (the timing itself is not a test): a spec that does not load stops
# it before anything is measured, and it compares eager CPU kernels only
_, err = run("bench", "moe", "--kernels", "/nonexistent/pkg", "--skip-peers", code=1)
expect(err, "--kernels /nonexistent/pkg", "bench moe --kernels with a missing package")
_, err = run("bench", "moe", "--kernels", good, "--compile", code=2)
expect(err, "not with --device or --compile", "bench moe --kernels --compile")

# the StableHLO package of kernels/ (ragged_dot for PJRT devices): accepted for any target and
# for PJRT, rejected for the CPU with the reason; its snippets registered per PJRT kind
shlo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels", "ragged_stablehlo")
out, _ = run("kernels", "explain", shlo)
expect(out, "Accepted ember-stablehlo: ember-ragged-stablehlo v1 (Apache-2.0), chosen",
       "explain shlo")
expect(out, "ragged_dot: ragged_dot_native.mlir for pjrt:tpu, priority 20", "explain shlo")
expect(out, "ragged_dot: ragged_dot_gather.mlir for pjrt (every plugin), priority 10",
       "explain shlo")
out, _ = run("kernels", "explain", "--target", "cpu", shlo, code=1)
expect(out, "Rejected ember-stablehlo: StableHLO variants are for PJRT devices; the target is the "
       "CPU", "explain shlo for the CPU")
out, _ = run("kernels", "explain", "--target", "pjrt:cpu", good, code=1)
expect(out, "a cpu variant; the target is a PJRT device (pjrt:cpu)",
       "explain a CPU package for PJRT")
out, _ = run("--kernels", shlo, "kernels", "list", "--kind", "pjrt:tpu")
expect(out, "ragged_dot_native *", "list shlo on pjrt:tpu")
expect(out, "ragged_dot_gather ", "list shlo on pjrt:tpu")
out, _ = run("--kernels", shlo, "kernels", "list")
expect(out, "only the built-in kernels", "list shlo on the CPU")

run("kernels", "bogus", code=2)
if failures:
    sys.exit(1)
print("kernels CLI: all checks passed")
