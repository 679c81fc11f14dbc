#!/usr/bin/env python3
"""`ember image --device DEV` against diffusers: a few pipelines of each kind on one device.

usage: check_image_device.py DEV EMBER [ARGS...]

The device counterpart of check_image.py (which runs every option on the CPU): DDIM from the
committed latents, DDPM seeded (per-step noise drawn on the host), Stable Diffusion with a prompt
and classifier-free guidance, DiT with a class label, SD3 and Flux from their latents; each eager
and with --compile, compared with diffusers' output_type="np" image within 1e-3 (the fixtures of
scripts/gen_diffusion_fixtures.py, gen_sd_fixtures.py, gen_dit_fixtures.py, gen_sd3_fixtures.py,
gen_flux_fixtures.py).
Exits 77 (skipped) when the device is not found. scripts/gpu-check.sh runs it on an NVIDIA GPU
(cuda:0); on XLA's CPU plugin (xla:0) it is the same script's dry run.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_image import bundle, read_npy, run, write_npy  # noqa: E402


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    dev, ember = sys.argv[1], sys.argv[2:]
    fixtures = os.environ.get("EMBER_FIXTURES") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "fixtures")
    d = lambda name: os.path.join(fixtures, "diffusion", name)  # noqa: E731
    ddim = bundle(fixtures, "ddim_three_ref")
    runs = bundle(fixtures, "pipeline_runs_ref")
    sd = bundle(fixtures, "sd_tiny_ref")
    dit = bundle(fixtures, "dit_runs_ref")
    sd3 = bundle(fixtures, "sd3_tiny_ref")
    flux = bundle(fixtures, "flux_tiny_ref")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        lat = {}
        for key, b, name in [("ddim", ddim, "latents"), ("sd", sd, "cfg_latents"),
                             ("dit", dit, "latents"), ("sd3", sd3, "latents"),
                             ("flux", flux, "latents")]:
            lat[key] = os.path.join(tmp, key + "_latents.npy")
            write_npy(lat[key], *b[name])
        cases = [
            ("ddim latents", ["--model", d("ddim_three"), "--latents", lat["ddim"], "--steps",
                              "10"], ddim["image"]),
            ("ddpm seed", ["--model", d("ddpm_attn"), "--seed", "1234", "--steps", "12"],
             runs["ddpm_seeded_image"]),
            ("sd prompt", ["--model", d("sd_tiny"), "--prompt", "a photo of a cat", "--latents",
                           lat["sd"], "--steps", "4"], sd["cfg_image"]),
            ("dit latents", ["--model", d("dit_pipe"), "--class-label", "7", "--steps", "6",
                             "--latents", lat["dit"]], dit["cfg_image"]),
            ("sd3 latents", ["--model", d("sd3_tiny"), "--prompt", "a photo of a cat", "--steps",
                             "4", "--max-sequence-length", "8", "--latents", lat["sd3"]],
             sd3["latents_image"]),
            ("flux latents", ["--model", d("flux_tiny"), "--prompt", "a photo of a cat",
                              "--guidance", "3.5", "--steps", "4", "--height", "16", "--width",
                              "16", "--max-sequence-length", "8", "--latents", lat["flux"]],
             flux["latents_image"]),
        ]
        for name, args, (wshape, want) in cases:
            for extra in ([], ["--compile"]):
                label = "%s%s on %s" % (name, " --compile" if extra else "", dev)
                npy = os.path.join(tmp, "out.npy")
                if os.path.exists(npy):
                    os.remove(npy)
                r = run(ember, args + extra + ["--device", dev, "--out",
                                               os.path.join(tmp, "out.png"), "--out-npy", npy])
                if "no device named" in r.stderr:
                    print("SKIPPED (loudly): no device %s" % dev)
                    sys.exit(77)
                if not os.path.exists(npy):
                    failures.append("%s: exit %d:\n%s" % (label, r.returncode, r.stderr[-2000:]))
                    print("FAIL %s: exit %d" % (label, r.returncode))
                    continue
                shape, got = read_npy(npy)
                err = max(abs(a - b) for a, b in zip(got, want)) if shape == wshape else -1
                ok = shape == wshape and err <= 1e-3
                step = [ln for ln in r.stderr.splitlines() if "s/step" in ln]
                print("%s %s: image %s, max |ember - diffusers| = %.2g%s" % (
                    "ok  " if ok else "FAIL", label, shape, err,
                    ("; last step line: " + step[-1].strip()[-60:]) if step else ""))
                if not ok:
                    failures.append("%s: image %s (diffusers %s), max |ember - diffusers| = %g"
                                    % (label, shape, wshape, err))
    if failures:
        sys.exit("FAIL:\n" + "\n".join(failures))
    print("all %d runs on %s within 1e-3 of diffusers" % (2 * len(cases), dev))


if __name__ == "__main__":
    main()
