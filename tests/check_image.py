#!/usr/bin/env python3
"""`ember image` against diffusers (tests/fixtures/diffusion, scripts/gen_diffusion_fixtures.py).

usage: check_image.py EMBER [ARGS...]  (the ember command, maybe behind an emulator)

Runs the tool on the committed pipeline folders and compares the image it writes with
--out-npy to diffusers' output_type="np" image within 1e-3: DDIM from the committed latents
(--latents), DDPM seeded (--seed, per-step noise included), a DDPM folder with --scheduler
euler; checks the PNG's signature and size and one progress line per step, and the clear
errors for options of other pipelines, a missing --seed/--latents and latents of the wrong
shape; DiTPipeline with --class-label and --guidance (seeded, from latents, without
guidance, with --scheduler ddpm, a list of labels as one batch) and its label errors; --compile (one program for all steps) against the eager image, on the CPU and on XLA's
CPU plugin when installed. No numpy needed: the fixtures' Bundle and the .npy files are read with struct.
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile


def fail(msg):
    sys.exit("FAIL: " + msg)


def bundle(fixtures, name):
    with open(os.path.join(fixtures, "diffusion", name + ".json")) as f:
        doc = json.load(f)
    with open(os.path.join(fixtures, "diffusion", name + ".bin"), "rb") as f:
        blob = f.read()
    out = {}
    for k, t in doc["tensors"].items():
        if t["dtype"] == "f32":
            n = t["nbytes"] // 4
            out[k] = (t["shape"], struct.unpack_from("<%df" % n, blob, t["offset"]))
    return out


def write_npy(path, shape, values):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % (
        ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else ""))
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % len(values), *values))


def read_npy(path):
    with open(path, "rb") as f:
        b = f.read()
    if b[:6] != b"\x93NUMPY" or b[6] != 1:
        fail(path + ": not a version 1 .npy file")
    hlen = struct.unpack_from("<H", b, 8)[0]
    if (10 + hlen) % 64:
        fail(path + ": header not padded to 64 bytes")
    h = b[10:10 + hlen].decode()
    if "'descr': '<f4'" not in h or "'fortran_order': False" not in h:
        fail(path + ": header " + h)
    shape = [int(s) for s in h[h.index("(") + 1:h.index(")")].split(",") if s.strip()]
    n = 1
    for s in shape:
        n *= s
    if len(b) != 10 + hlen + 4 * n:
        fail(path + ": %d bytes for shape %s" % (len(b), shape))
    return shape, struct.unpack_from("<%df" % n, b, 10 + hlen)


def run(ember, args):
    return subprocess.run(ember + ["image"] + args, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ember = sys.argv[1:]
    fixtures = os.environ.get("EMBER_FIXTURES") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "fixtures")
    d = lambda name: os.path.join(fixtures, "diffusion", name)  # noqa: E731
    ddim = bundle(fixtures, "ddim_three_ref")
    runs = bundle(fixtures, "pipeline_runs_ref")
    sd = bundle(fixtures, "sd_tiny_ref")
    dit = bundle(fixtures, "dit_runs_ref")  # scripts/gen_dit_fixtures.py
    tiling = bundle(fixtures, "vae_tiling_ref")  # scripts/gen_vae_tiling_fixtures.py
    i2i = bundle(fixtures, "sd_img2img_ref")  # scripts/gen_sd_img2img_fixtures.py
    batch = bundle(fixtures, "sd_batch_ref")  # scripts/gen_sd_batch_fixtures.py
    dit_batch = bundle(fixtures, "dit_batch_ref")  # scripts/gen_dit_batch_fixtures.py
    sdxl = bundle(fixtures, "sdxl_tiny_ref")  # scripts/gen_sdxl_fixtures.py
    refiner = bundle(fixtures, "sdxl_refiner_tiny_ref")  # scripts/gen_sdxl_refiner_fixtures.py
    inpaint = bundle(fixtures, "sd_inpaint_ref")  # scripts/gen_sd_inpaint_fixtures.py
    embeds = bundle(fixtures, "sd_prompt_embeds_ref")  # scripts/gen_sd_prompt_embeds_fixtures.py
    xl_embeds = bundle(fixtures, "sdxl_prompt_embeds_ref")  # gen_sdxl_prompt_embeds_fixtures.py
    gens = bundle(fixtures, "generator_list_ref")  # scripts/gen_generator_list_fixtures.py
    sd3 = bundle(fixtures, "sd3_tiny_ref")  # scripts/gen_sd3_fixtures.py
    sd3_t5 = bundle(fixtures, "sd3_t5_ref")  # scripts/gen_sd3_t5_fixtures.py
    flux = bundle(fixtures, "flux_tiny_ref")  # scripts/gen_flux_fixtures.py
    png_missing = False
    with tempfile.TemporaryDirectory() as tmp:
        lat = os.path.join(tmp, "latents.npy")
        write_npy(lat, *ddim["latents"])
        sd_lat = os.path.join(tmp, "sd_latents.npy")
        write_npy(sd_lat, *sd["cfg_latents"])
        dit_lat = os.path.join(tmp, "dit_latents.npy")
        write_npy(dit_lat, *dit["latents"])
        sd3_lat = os.path.join(tmp, "sd3_latents.npy")
        write_npy(sd3_lat, *sd3["latents"])
        flux_lat = os.path.join(tmp, "flux_latents.npy")  # packed [1, 16, 64]
        write_npy(flux_lat, *flux["latents"])
        init_euler = os.path.join(tmp, "init_euler.npy")
        write_npy(init_euler, *i2i["euler_init"])
        init_pndm = os.path.join(tmp, "init_pndm.npy")  # [H, W, 3]: the batch of one implied
        write_npy(init_pndm, i2i["pndm_init"][0][1:], i2i["pndm_init"][1])
        init_refiner = os.path.join(tmp, "init_refiner.npy")
        write_npy(init_refiner, *refiner["scores_init"])
        init_inpaint = os.path.join(tmp, "init_inpaint.npy")
        write_npy(init_inpaint, *inpaint["inpaint_strength_init"])
        mask_inpaint = os.path.join(tmp, "mask_inpaint.npy")  # [1, H, W, 1]
        write_npy(mask_inpaint, *inpaint["inpaint_strength_mask"])
        init_png_mask = os.path.join(tmp, "init_png_mask.npy")
        write_npy(init_png_mask, *inpaint["png_mask_init"])
        # the embeddings options' files: the C tests' runs "embeds_neg" and "xl_given"
        npys = {}
        for key, b in [("embeds_neg_embeds", embeds), ("embeds_neg_neg_embeds", embeds),
                       ("xl_given_embeds", xl_embeds), ("xl_given_neg_embeds", xl_embeds),
                       ("xl_given_pooled", xl_embeds), ("xl_given_neg_pooled", xl_embeds)]:
            npys[key] = os.path.join(tmp, key + ".npy")
            write_npy(npys[key], *b[key])
        # the SDXL base -> refiner hand-over (test_sdxl_refiner.c's): the base's latents at
        # --denoising-end 0.7, written by --out-latents, checked against diffusers' here and
        # given to the refiner's cases below (--image-latents)
        handover = os.path.join(tmp, "handover_latents.npy")
        r = run(ember, ["--model", d("sdxl_tiny"), "--prompt", "a photo of a cat", "--guidance",
                        "5", "--steps", "10", "--seed", "91", "--denoising-end", "0.7",
                        "--out-latents", handover])
        if r.returncode != 0:
            fail("sdxl --denoising-end --out-latents: exit %d:\n%s" % (r.returncode, r.stderr))
        shape, got = read_npy(handover)
        wshape, want = refiner["handover_latents"]
        err = max(abs(a - b) for a, b in zip(got, want))
        if shape != wshape or err > 1e-3:
            fail("sdxl --denoising-end 0.7 --out-latents: latents %s, diffusers %s, max "
                 "|ember - diffusers| = %g" % (shape, wshape, err))
        nlines = len([ln for ln in r.stderr.splitlines() if "s/step" in ln])
        if nlines != 7:
            fail("sdxl --denoising-end 0.7: %d progress lines for 7 of 10 steps" % nlines)
        print("sdxl --denoising-end 0.7 --out-latents: max |ember - diffusers| = %.2g, 7 of 10 "
              "steps" % err)
        cases = [
            ("ddim latents", ["--model", d("ddim_three"), "--latents", lat, "--steps", "10"],
             ddim["image"], 10),
            ("ddpm seed", ["--model", d("ddpm_attn"), "--seed", "1234", "--steps", "12"],
             runs["ddpm_seeded_image"], 12),
            ("ddpm --scheduler euler", ["--model", d("ddpm_attn"), "--seed", "3", "--steps", "10",
                                        "--scheduler", "euler"], runs["ddpm_as_euler_image"], 10),
            ("ddim eta", ["--model", d("ddim_three"), "--seed", "5", "--steps", "8", "--eta", "0.5",
                          "--device", "cpu"], runs["ddim_eta_image"], 8),
            # StableDiffusionPipeline (scripts/gen_sd_fixtures.py's runs "cfg" and "negative");
            # its PNDM (PLMS) schedule has one timestep more than the steps asked for
            ("sd prompt", ["--model", d("sd_tiny"), "--prompt", "a photo of a cat", "--latents",
                           sd_lat, "--steps", "4"], sd["cfg_image"], 5),
            ("sd negative seed", ["--model", d("sd_tiny"), "--prompt", "a red cube on a table",
                                  "--negative-prompt", "blurry, low quality", "--guidance", "3",
                                  "--seed", "5", "--steps", "3"], sd["negative_image"], 4),
            ("sd --vae-tiling", ["--model", d("sd_tiny"), "--prompt", "a photo of a cat",
                                 "--height", "32", "--width", "32", "--steps", "2", "--seed", "3",
                                 "--vae-tiling"], tiling["sd_tiled_image"], 3),
            # image to image (StableDiffusionImg2ImgPipeline): int(steps * strength) steps run;
            # PNDM's schedule has one timestep more
            ("sd --init-image euler", ["--model", d("sd_tiny"), "--prompt", "an astronaut",
                                       "--guidance", "1", "--steps", "6", "--seed", "13",
                                       "--scheduler", "euler", "--init-image", init_euler,
                                       "--strength", "0.5"], i2i["euler_image"], 3),
            ("sd --init-image png", ["--model", d("sd_tiny"), "--prompt", "a boat", "--steps", "4",
                                     "--seed", "29", "--scheduler", "euler", "--init-image",
                                     d("sd_img2img_init.png"), "--strength", "0.75"],
             i2i["png_image"], 3),
            ("sd --init-image pndm", ["--model", d("sd_tiny"), "--prompt", "a photo of a cat",
                                      "--steps", "5", "--seed", "3", "--init-image", init_pndm,
                                      "--strength", "0.6"], i2i["pndm_image"], 4),
            # Stable Diffusion batches: --num-images N is num_images_per_prompt=N, one run
            ("sd --num-images 2", ["--model", d("sd_tiny"), "--prompt", "a photo of a cat",
                                   "--steps", "3", "--seed", "3", "--height", "8", "--width",
                                   "8", "--num-images", "2"], batch["cfg2_image"], 4),
            ("sd --num-images 3 ddpm --vae-slicing", ["--model", d("sd_tiny"), "--prompt",
                                                      "a red cube", "--negative-prompt", "blurry",
                                                      "--guidance", "3", "--steps", "3", "--seed",
                                                      "9", "--height", "8", "--width", "8",
                                                      "--scheduler", "ddpm", "--num-images", "3",
                                                      "--vae-slicing"], batch["ddpm3_image"], 3),
            # StableDiffusionXLPipeline (scripts/gen_sdxl_fixtures.py's runs "negative" and
            # "size"; --scheduler euler is the folder's own EulerDiscreteScheduler)
            ("sdxl negative", ["--model", d("sdxl_tiny"), "--prompt", "a red cube on a table",
                               "--negative-prompt", "blurry, low quality", "--guidance", "5",
                               "--seed", "5", "--steps", "3", "--scheduler", "euler"],
             sdxl["negative_image"], 3),
            ("sdxl size", ["--model", d("sdxl_tiny"), "--prompt", "a dog in the snow",
                           "--guidance", "3", "--seed", "21", "--steps", "3", "--height", "24",
                           "--width", "16"], sdxl["size_image"], 3),
            # the SDXL refiner (scripts/gen_sdxl_refiner_fixtures.py's run "scores"): 3 of 5
            # steps at strength 0.6
            ("sdxl refiner scores", ["--model", d("sdxl_refiner_tiny"), "--prompt",
                                     "a red cube on a table", "--negative-prompt", "blurry",
                                     "--guidance", "4", "--steps", "5", "--seed", "53",
                                     "--init-image", init_refiner, "--strength", "0.6",
                                     "--aesthetic-score", "8", "--negative-aesthetic-score", "1"],
             refiner["scores_image"], 3),
            # inpainting (scripts/gen_sd_inpaint_fixtures.py's run "inpaint_strength": the
            # 9-channel UNet, 3 of 6 Euler steps at strength 0.6)
            ("sd inpaint", ["--model", d("sd_inpaint_tiny"), "--prompt", "a red cube",
                            "--negative-prompt", "blurry", "--guidance", "3", "--steps", "6",
                            "--seed", "63", "--scheduler", "euler", "--init-image", init_inpaint,
                            "--mask-image", mask_inpaint, "--strength", "0.6"],
             inpaint["inpaint_strength_image"], 3),
            # the mask as an RGB PNG, made grey as PIL's convert("L") does (run "png_mask")
            ("sd inpaint png mask", ["--model", d("sd_inpaint_tiny"), "--prompt", "a tree",
                                     "--guidance", "5", "--steps", "3", "--seed", "71",
                                     "--init-image", init_png_mask, "--mask-image",
                                     d("sd_inpaint_mask.png")], inpaint["png_mask_image"], 4),
            # prompt embeddings (test_sd_prompt_embeds.c's runs "embeds_neg": two rows, their
            # negatives given, two images each; and "xl_given": SDXL with the pooled ones)
            ("sd --prompt-embeds", ["--model", d("sd_tiny"), "--prompt-embeds",
                                    npys["embeds_neg_embeds"], "--negative-prompt-embeds",
                                    npys["embeds_neg_neg_embeds"], "--guidance", "5", "--steps",
                                    "3", "--seed", "83", "--num-images", "2"],
             embeds["embeds_neg_image"], 4),
            ("sdxl --pooled-prompt-embeds", ["--model", d("sdxl_tiny"), "--prompt-embeds",
                                             npys["xl_given_embeds"], "--negative-prompt-embeds",
                                             npys["xl_given_neg_embeds"], "--pooled-prompt-embeds",
                                             npys["xl_given_pooled"],
                                             "--negative-pooled-prompt-embeds",
                                             npys["xl_given_neg_pooled"], "--guidance", "5",
                                             "--steps", "3", "--seed", "105"],
             xl_embeds["xl_given_image"], 3),
            # the refiner from the base's latents: at --denoising-start 0.7 (no noise added), and
            # noised at --strength 0.5 (5 of 10 steps)
            ("sdxl refiner --denoising-start", ["--model", d("sdxl_refiner_tiny"), "--prompt",
                                                "a photo of a cat", "--guidance", "5", "--steps",
                                                "10", "--seed", "93", "--image-latents",
                                                handover, "--denoising-start", "0.7"],
             refiner["handover_image"], 3),
            ("sdxl refiner --image-latents", ["--model", d("sdxl_refiner_tiny"), "--prompt",
                                              "a photo of a cat", "--guidance", "5", "--steps",
                                              "10", "--seed", "93", "--image-latents", handover,
                                              "--strength", "0.5"], refiner["latents_image"], 5),
            # a generator per image (test_generator_list.c's runs "sd_list" and "ddpm_list")
            ("sd --seeds", ["--model", d("sd_tiny"), "--prompt", "a photo of a cat", "--guidance",
                            "7.5", "--steps", "3", "--scheduler", "euler-a", "--seeds", "5,7"],
             gens["sd_list_image"], 3),
            ("ddpm --seeds", ["--model", d("ddpm_attn"), "--steps", "5", "--seeds", "1,2,3"],
             gens["ddpm_list_image"], 5),
            # StableDiffusion3Pipeline without T5 (scripts/gen_sd3_fixtures.py's runs "cfg"
            # from its latents, and "size": 16x24 with the default 256 zero T5 tokens)
            ("sd3 latents", ["--model", d("sd3_tiny"), "--prompt", "a photo of a cat",
                             "--steps", "4", "--max-sequence-length", "8", "--latents", sd3_lat],
             sd3["latents_image"], 4),
            ("sd3 size", ["--model", d("sd3_tiny"), "--prompt", "a dog in the snow",
                          "--negative-prompt", "dark", "--guidance", "4", "--steps", "2",
                          "--seed", "21", "--height", "16", "--width", "24"],
             sd3["size_image"], 2),
            ("sd3 --num-images 2", ["--model", d("sd3_tiny"), "--prompt", "an astronaut",
                                    "--guidance", "4", "--steps", "2", "--seed", "9",
                                    "--max-sequence-length", "4", "--num-images", "2"],
             sd3["images2_image"], 2),
            # the folder with its T5 (run "negative": seeded, a negative prompt)
            ("sd3 with T5", ["--model", d("sd3_t5"), "--prompt", "a red cube on a table",
                             "--negative-prompt", "blurry, low quality", "--guidance", "5",
                             "--steps", "3", "--seed", "5", "--max-sequence-length", "8"],
             sd3_t5["negative_image"], 3),
            # FluxPipeline (scripts/gen_flux_fixtures.py's run "dev" from its packed latents, and
            # "prompt2": seeded, the T5's own text)
            ("flux latents", ["--model", d("flux_tiny"), "--prompt", "a photo of a cat",
                              "--guidance", "3.5", "--steps", "4", "--height", "16", "--width",
                              "16", "--max-sequence-length", "8", "--latents", flux_lat],
             flux["latents_image"], 4),
            ("flux --prompt-2", ["--model", d("flux_tiny"), "--prompt", "a red cube on a table",
                                 "--prompt-2", "a blue sphere", "--guidance", "5", "--steps",
                                 "3", "--seed", "5", "--height", "16", "--width", "16",
                                 "--max-sequence-length", "8"], flux["prompt2_image"], 3),
            ("dit --class-label", ["--model", d("dit_pipe"), "--class-label", "7", "--guidance",
                                   "4", "--steps", "6", "--seed", "0"], dit["cfg_image"], 6),
            ("dit latents", ["--model", d("dit_pipe"), "--class-label", "7", "--steps", "6",
                             "--latents", dit_lat], dit["cfg_image"], 6),
            ("dit no guidance", ["--model", d("dit_pipe"), "--class-label", "3", "--guidance",
                                 "1", "--steps", "5", "--seed", "2"], dit["nocfg_image"], 5),
            ("dit --scheduler ddpm", ["--model", d("dit_pipe"), "--class-label", "11",
                                      "--guidance", "2.5", "--steps", "5", "--seed", "9",
                                      "--scheduler", "ddpm"], dit["ddpm_cfg_image"], 5),
            # a list of labels: one batched run, diffusers' class_labels=[7, 3, 999]
            ("dit --class-label 7,3,999", ["--model", d("dit_pipe"), "--class-label", "7,3,999",
                                           "--guidance", "4", "--steps", "3", "--seed", "5"],
             dit_batch["dit_cfg3_image"], 3),
        ]
        for i, (name, args, (wshape, want), nsteps) in enumerate(cases):
            png, npy = os.path.join(tmp, "%d.png" % i), os.path.join(tmp, "%d.npy" % i)
            r = run(ember, args + ["--out", png, "--out-npy", npy])
            if r.returncode != 0:
                if "no PNG support" in r.stderr and os.path.exists(npy):
                    png_missing = True
                else:
                    fail("%s: exit %d:\n%s" % (name, r.returncode, r.stderr))
            shape, got = read_npy(npy)
            if shape != wshape:
                fail("%s: image shape %s, diffusers %s" % (name, shape, wshape))
            err = max(abs(a - b) for a, b in zip(got, want))
            if err > 1e-3:
                fail("%s: max |ember - diffusers| = %g" % (name, err))
            lines = [ln for ln in r.stderr.splitlines() if "s/step" in ln]
            if len(lines) != nsteps:
                fail("%s: %d progress lines for %d steps:\n%s" % (name, len(lines), nsteps,
                                                                   r.stderr))
            if not png_missing:
                with open(png, "rb") as f:
                    head = f.read(24)
                # several images: a grid of ceil(sqrt(N)) columns
                cols = math.ceil(math.sqrt(wshape[0]))
                pw, ph = wshape[2] * cols, wshape[1] * math.ceil(wshape[0] / cols)
                if head[:8] != b"\x89PNG\r\n\x1a\n" or struct.unpack(">II", head[16:24]) != (
                        pw, ph):
                    fail("%s: %s is not a %dx%d PNG" % (name, png, pw, ph))
            print("%s: max |ember - diffusers| = %.2g, %d progress lines" % (name, err, nsteps))

        # --dtype bf16 / f16: diffusers' torch_dtype (test_pipeline_dtype.c's runs "sd_bf16" and
        # "ddim_f16", scripts/gen_pipeline_dtype_fixtures.py): within 2 x diffusers' own
        # half-vs-f32 gap + 0.005 of diffusers' half-precision image, and not the f32 image
        half = bundle(fixtures, "pipeline_dtype_ref")
        with open(os.path.join(fixtures, "diffusion", "pipeline_dtype_ref.json")) as f:
            half_runs = json.load(f)["meta"]["runs"]
        for run_name, dt, extra in (("sd_bf16", "bf16", ["--prompt", "a photo of a cat",
                                                          "--guidance", "7.5", "--height", "16",
                                                          "--width", "16"]),
                                    ("ddim_f16", "f16", [])):
            r = half_runs[run_name]
            lat_h = os.path.join(tmp, run_name + "_latents.npy")
            write_npy(lat_h, *half[run_name + "_latents"])
            npy = os.path.join(tmp, run_name + ".npy")
            res = run(ember, ["--model", d(r["folder"]), "--latents", lat_h, "--steps",
                              str(r["steps"]), "--dtype", dt, "--out", os.path.join(tmp, "h.png"),
                              "--out-npy", npy] + extra)
            if res.returncode != 0 and not (png_missing and os.path.exists(npy)):
                fail("--dtype %s (%s): exit %d:\n%s" % (dt, run_name, res.returncode, res.stderr))
            _, got = read_npy(npy)
            to_half = max(abs(a - b) for a, b in zip(got, half[run_name + "_image"][1]))
            to_f32 = max(abs(a - b) for a, b in zip(got, half[run_name + "_f32"][1]))
            bound = 2 * r["gap_to_f32"] + 0.005
            if not (to_half <= bound and to_f32 > 1e-3):
                fail("--dtype %s (%s): max |ember - diffusers %s| = %g (bound %g), |ember - f32| "
                     "= %g (must exceed 1e-3)" % (dt, run_name, dt, to_half, bound, to_f32))
            print("--dtype %s (%s): max |ember - diffusers %s| = %.2g (bound %.2g)" % (
                dt, run_name, dt, to_half, bound))
        bad = run(ember, ["--model", d("ddim_three"), "--seed", "1", "--dtype", "i8", "--out",
                          os.path.join(tmp, "x.png")])
        if bad.returncode != 2 or "f32, bf16 or f16" not in bad.stderr:
            fail("--dtype i8: exit %d (want 2), stderr %r" % (bad.returncode, bad.stderr))

        # --compile: the denoiser step traced once (the timestep an input), the same image as
        # the eager run of the same case (within f32 rounding of the compiled plan) and as
        # diffusers'; on XLA's CPU plugin too, when it is installed
        compiled = [(0, "ddim latents", "cpu"), (1, "ddpm seed", "cpu"), (0, "ddim latents", "xla:0")]
        for k, name, dev in compiled:
            _, args, (wshape, want), nsteps = cases[k]
            _, eager = read_npy(os.path.join(tmp, "%d.npy" % k))
            npy = os.path.join(tmp, "c%d_%s.npy" % (k, dev.replace(":", "")))
            r = run(ember, args + ["--compile", "--device", dev, "--out",
                                   os.path.join(tmp, "c.png"), "--out-npy", npy])
            if dev != "cpu" and "no device named" in r.stderr:
                print("SKIPPED (loudly): %s --compile on %s: no XLA plugin (install xla-cpu-pjrt "
                      "or set EMBER_PJRT_XLA_PLUGIN)" % (name, dev))
                continue
            if r.returncode != 0 and not (png_missing and os.path.exists(npy)):
                fail("%s --compile on %s: exit %d:\n%s" % (name, dev, r.returncode, r.stderr))
            _, got = read_npy(npy)
            d_eager = max(abs(a - b) for a, b in zip(got, eager))
            d_ref = max(abs(a - b) for a, b in zip(got, want))
            tol = 1e-5 if dev == "cpu" else 5e-4
            if d_eager > tol or d_ref > 1e-3:
                fail("%s --compile on %s: max |compiled - eager| = %g (%g allowed), "
                     "|compiled - diffusers| = %g" % (name, dev, d_eager, tol, d_ref))
            stat = [ln for ln in r.stderr.splitlines() if ln.startswith("compile mode:")]
            want_stat = "compile mode: 1 program(s) compiled in"
            if len(stat) != 1 or not stat[0].startswith(want_stat) or (
                    "for %d steps" % nsteps) not in stat[0]:
                fail("%s --compile on %s: '%s ... for %d steps' expected, got %r" % (
                    name, dev, want_stat, nsteps, stat))
            print("%s --compile on %s: max |compiled - eager| = %.2g, |compiled - diffusers| = "
                  "%.2g; %s" % (name, dev, d_eager, d_ref, stat[0]))

        out = ["--out", os.path.join(tmp, "x.png")]
        bad_lat = os.path.join(tmp, "bad.npy")
        write_npy(bad_lat, [1, 3, 8, 8], [0.0] * 192)
        bad = [
            (["--model", d("ddpm_attn"), "--seed", "1", "--prompt", "a cat"] + out, 2,
             "--prompt is not supported for DDPMPipeline (an unconditional pipeline)"),
            (["--model", d("ddim_three"), "--seed", "1", "--guidance", "7"] + out, 2,
             "--guidance is not supported for DDIMPipeline (an unconditional pipeline)"),
            (["--model", d("sd_tiny"), "--seed", "1"] + out, 2,
             "StableDiffusionPipeline needs --prompt"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt", "x", "--class-label", "3"] + out,
             2, "--class-label is not supported for StableDiffusionPipeline (a text-to-image"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt", "x", "--height", "15"] + out, 1,
             "multiples of 2"),
            (["--model", d("sdxl_tiny"), "--seed", "1", "--prompt", "x", "--height", "15"] + out,
             1, "StableDiffusionXLPipeline: height 15"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt", "x", "--prompt-2", "y"] + out,
             2, "--prompt-2 is not supported for StableDiffusionPipeline"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt", "x", "--negative-prompt-2",
              "y"] + out, 2, "--negative-prompt-2 is not supported for StableDiffusionPipeline"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt", "x", "--strength", "0.5"] + out,
             2, "--strength needs --init-image"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt", "x", "--mask-image",
              init_euler] + out, 2, "--mask-image needs --init-image"),
            (["--model", d("sd_inpaint_tiny"), "--seed", "1", "--prompt", "x"] + out, 1,
             "an inpainting UNet (9 input channels)"),
            (["--model", d("ddim_three"), "--seed", "1", "--init-image", init_euler] + out, 2,
             "--init-image is not supported for DDIMPipeline"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt", "x", "--init-image", init_euler,
              "--strength", "0.1", "--steps", "5"] + out, 1, "leaves no step"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt", "x", "--max-sequence-length",
              "8"] + out, 2, "--max-sequence-length is not supported for StableDiffusionPipeline"),
            (["--model", d("sd3_tiny"), "--seed", "1", "--prompt", "x", "--vae-tiling"] + out,
             1, "vae_tiling is not supported for StableDiffusion3Pipeline"),
            (["--model", d("sd3_tiny"), "--seed", "1", "--prompt", "x", "--height", "10"] + out,
             1, "multiples of 4"),
            (["--model", d("flux_tiny"), "--seed", "1", "--prompt", "x", "--negative-prompt",
              "y"] + out, 2, "--negative-prompt is not supported for FluxPipeline"),
            (["--model", d("flux_tiny"), "--seed", "1", "--prompt", "x", "--height", "18",
              "--width", "16"] + out, 1, "multiples of 4"),
            (["--model", d("sd3_tiny"), "--seed", "1", "--class-label", "3"] + out, 2,
             "--class-label is not supported for StableDiffusion3Pipeline (a text-to-image"),
            (["--model", d("ddim_three"), "--seed", "1", "--class-label", "3"] + out, 2,
             "--class-label is not supported for DDIMPipeline (an unconditional pipeline)"),
            (["--model", d("dit_pipe"), "--seed", "1", "--class-label", "3", "--prompt", "x"]
             + out, 2, "--prompt is not supported for DiTPipeline (a class-conditional"),
            (["--model", d("dit_pipe"), "--seed", "1", "--class-label", "1000"] + out, 1,
             "class label 1000 is out of range"),
            (["--model", d("dit_pipe"), "--seed", "1"] + out, 1, "needs a class label"),
            (["--model", d("dit_pipe"), "--seed", "1", "--class-label", "7,1000"] + out, 1,
             "class label 1000 (index 1 of 2) is out of range"),
            (["--model", d("dit_pipe"), "--seed", "1", "--class-label", "7,3", "--num-images",
              "2"] + out, 2, "give no --num-images with it"),
            (["--model", d("ddpm_attn")] + out, 2, "--seed, --seeds or --latents is required"),
            # --seeds, the hand-over and the embeddings options
            (["--model", d("ddpm_attn"), "--seeds", "1,x"] + out, 2,
             "--seeds expects an integer, got 'x'"),
            (["--model", d("ddpm_attn"), "--seeds", "1,2", "--seed", "3"] + out, 2,
             "--seeds is a generator per image instead of --seed"),
            (["--model", d("sd_tiny"), "--prompt", "x", "--seeds", "1,2", "--num-images", "3"]
             + out, 2, "--num-images, when given, must equal it"),
            (["--model", d("dit_pipe"), "--class-label", "7", "--seeds", "1,2"] + out, 1,
             "2 seeds (a generator per image) for a batch of 1 images"),
            (["--model", d("sdxl_tiny"), "--seed", "1", "--prompt", "x", "--denoising-end", "1"]
             + out, 2, "--denoising-end must be in (0, 1), got 1"),
            (["--model", d("sdxl_tiny"), "--seed", "1", "--prompt", "x", "--denoising-end", "abc"]
             + out, 2, "--denoising-end expects a number, got 'abc'"),
            (["--model", d("sdxl_refiner_tiny"), "--seed", "1", "--prompt", "x",
              "--denoising-start", "0.7"] + out, 2,
             "--denoising-start needs --image-latents or --init-image"),
            (["--model", d("sdxl_refiner_tiny"), "--seed", "1", "--prompt", "x",
              "--image-latents", bad_lat, "--denoising-start", "0.7"] + out, 1,
             "image_latents f32[1,3,8,8]"),
            (["--model", d("sdxl_refiner_tiny"), "--seed", "1", "--prompt", "x",
              "--image-latents", bad_lat, "--init-image", init_refiner] + out, 2,
             "--image-latents is the init image as latents: give no --init-image"),
            (["--model", d("sdxl_tiny"), "--seed", "1", "--prompt", "x", "--out-latents",
              bad_lat] + out, 2, "--out-latents writes the latents instead of the image"),
            (["--model", d("ddpm_attn"), "--seed", "1", "--out-latents",
              os.path.join(tmp, "l.npy")], 1, "output_latents: DDPMPipeline"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt", "x", "--prompt-embeds",
              npys["embeds_neg_embeds"]] + out, 2, "--prompt-embeds replaces the prompts"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt", "x",
              "--negative-prompt-embeds", npys["embeds_neg_embeds"]] + out, 2,
             "--negative-prompt-embeds and the pooled embeddings go with --prompt-embeds"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt-embeds", bad_lat] + out, 1,
             "prompt_embeds f32[1,3,8,8]"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt-embeds",
              os.path.join(tmp, "missing.npy")] + out, 1, "--prompt-embeds: cannot open"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt-embeds", npys["embeds_neg_embeds"],
              "--pooled-prompt-embeds", npys["xl_given_pooled"]] + out, 2,
             "--pooled-prompt-embeds is not supported for StableDiffusionPipeline"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt", "x", "--denoising-end", "0.5"]
             + out, 2, "--denoising-end is not supported for StableDiffusionPipeline"),
            (["--model", d("ddpm_attn"), "--seed", "1", "--prompt-embeds",
              npys["embeds_neg_embeds"]] + out, 2,
             "--prompt-embeds is not supported for DDPMPipeline"),
            (["--model", d("ddim_three"), "--latents", bad_lat] + out, 1,
             "[1, 3, 8, 8] do not fit DDIMPipeline"),
            (["--model", d("ddim_three"), "--seed", "1", "--scheduler", "lms"] + out, 2,
             "--scheduler 'lms'"),
            (["--model", d("ddim_three"), "--seed", "1", "--steps", "0"] + out, 2, "--steps"),
            (["--model", d("nonexistent"), "--seed", "1"] + out, 1, "model_index.json"),
            (["--model", d("ddim_three"), "--seed", "1", "--vae-slicing"] + out, 1,
             "vae_slicing: DDIMPipeline"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt", "x", "--num-images", "1025"]
             + out, 2, "--num-images"),
            (["--model", d("sd_tiny"), "--seed", "1", "--prompt", "x", "--num-images", "-2"]
             + out, 2, "--num-images"),
        ]
        for args, code, want in bad:
            r = run(ember, args)
            if r.returncode != code or want not in r.stderr:
                fail("ember image %s: exit %d (%d expected), stderr %r; '%s' expected" % (
                    " ".join(args), r.returncode, code, r.stderr, want))
            print("error ok: " + next(ln for ln in r.stderr.splitlines() if want in ln))
    if png_missing:
        print("note: this build has no PNG support; the .npy images were checked")


if __name__ == "__main__":
    main()
