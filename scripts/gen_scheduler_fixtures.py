#!/usr/bin/env python3
"""Generates the diffusion fixtures under tests/fixtures/diffusion/ from the real diffusers and
torch (pinned in scripts/requirements-fixtures.txt):

  torch_randn.{json,bin}          torch.randn(..., generator=torch.Generator("cpu").manual_seed(S))
                                  as torch draws it on this CPU (its AVX2 kernels on x86-64)
  torch_randn_default.{json,bin}  the same draws with ATEN_CPU_CAPABILITY=default (torch's
                                  portable kernels: what torch runs on AVX-512 CPUs and on ARM)
  sched/<case>.json               the scheduler_config.json of each case
  schedulers.{json,bin}           per case: the tables (alphas_cumprod, sigmas, timesteps),
                                  add_noise at a timestep per sample (f32; bf16 for DDPM/DDIM/PNDM),
                                  init_noise_sigma, the first scale_model_input, and every step of
                                  a loop over all timesteps on a fixed fake model-output sequence
                                  (generator noise included for DDPM, DDIM eta > 0, Euler ancestral)

Usage: python scripts/gen_scheduler_fixtures.py

On x86-64 the script runs torch with ATEN_CPU_CAPABILITY=avx2 unless told otherwise, so that an
AVX-512 machine writes the same files as an AVX2 one. Other CPUs' float kernels differ from
these in the last bits (a few ulps in the scheduler steps), within the tests' tolerances.
"""
import json
import os
import platform
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from fixtures.common import Bundle  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "diffusion")
SHAPE = (1, 4, 8, 8)
SIZES = [1, 8, 15, 16, 17, 768, 3 * 32 * 32]


def rng_bundle(path):
    b = Bundle(path)
    for n in SIZES:
        g = torch.Generator("cpu").manual_seed(0)
        b.add(f"seed0_n{n}", torch.randn(n, generator=g))
    g = torch.Generator("cpu").manual_seed(1234)
    b.add("seed1234_shape1x4x8x8", torch.randn(SHAPE, generator=g))
    # one generator, successive draws: the cached second Box-Muller value of the scalar path
    # survives a vectorised draw in between
    g = torch.Generator("cpu").manual_seed(42)
    for i, n in enumerate([3, 20, 1, 1, 256, 5]):
        b.add(f"seed42_draw{i}_n{n}", torch.randn(n, generator=g))
    b.meta = {"capability": torch.backends.cpu.get_cpu_capability()}
    b.write()


# ---- scheduler configs: what diffusers users have on disk ----
SD15 = {"_class_name": "PNDMScheduler", "_diffusers_version": "0.6.0", "beta_end": 0.012,
        "beta_schedule": "scaled_linear", "beta_start": 0.00085, "num_train_timesteps": 1000,
        "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
        "trained_betas": None, "clip_sample": False}
SD21_V = {"_class_name": "DDIMScheduler", "_diffusers_version": "0.10.0.dev0", "beta_end": 0.012,
          "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
          "num_train_timesteps": 1000, "prediction_type": "v_prediction",
          "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
          "trained_betas": None}
TRAILING = {"_class_name": "DDIMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear",
            "beta_start": 0.00085, "clip_sample": False, "num_train_timesteps": 1000,
            "prediction_type": "v_prediction", "set_alpha_to_one": False,
            "timestep_spacing": "trailing", "rescale_betas_zero_snr": True}
DDPM_CIFAR = {"_class_name": "DDPMScheduler", "_diffusers_version": "0.1.1", "beta_end": 0.02,
              "beta_schedule": "linear", "beta_start": 0.0001, "clip_sample": True,
              "num_train_timesteps": 1000, "trained_betas": None, "variance_type": "fixed_small"}
DDPM_COS = {"_class_name": "DDPMScheduler", "beta_schedule": "squaredcos_cap_v2",
            "num_train_timesteps": 1000, "variance_type": "fixed_small_log",
            "clip_sample": True, "clip_sample_range": 2.0, "timestep_spacing": "linspace"}
DDPM_V = {"_class_name": "DDPMScheduler", "beta_schedule": "linear", "beta_start": 0.0001,
          "beta_end": 0.02, "num_train_timesteps": 100, "prediction_type": "v_prediction",
          "variance_type": "fixed_large", "clip_sample": False, "timestep_spacing": "trailing"}
EULER_KARRAS = {"_class_name": "EulerDiscreteScheduler", "beta_end": 0.012,
                "beta_schedule": "scaled_linear", "beta_start": 0.00085,
                "num_train_timesteps": 1000, "use_karras_sigmas": True, "steps_offset": 1,
                "timestep_spacing": "leading", "prediction_type": "epsilon",
                "interpolation_type": "linear"}
DPM_KARRAS = {"_class_name": "DPMSolverMultistepScheduler", "beta_end": 0.012,
              "beta_schedule": "scaled_linear", "beta_start": 0.00085,
              "num_train_timesteps": 1000, "use_karras_sigmas": True, "solver_order": 2,
              "algorithm_type": "dpmsolver++", "solver_type": "midpoint",
              "lower_order_final": True, "final_sigmas_type": "zero", "steps_offset": 1,
              "lambda_min_clipped": float("-inf")}  # saved by diffusers as a bare -Infinity
DPM_HEUN_V = {"_class_name": "DPMSolverMultistepScheduler", "beta_schedule": "linear",
              "beta_start": 0.0001, "beta_end": 0.02, "num_train_timesteps": 1000,
              "prediction_type": "v_prediction", "solver_type": "heun",
              "timestep_spacing": "trailing"}
DPM_LU = {"_class_name": "DPMSolverMultistepScheduler", "beta_end": 0.012,
          "beta_schedule": "scaled_linear", "beta_start": 0.00085,
          "num_train_timesteps": 1000, "use_lu_lambdas": True, "solver_order": 2,
          "algorithm_type": "dpmsolver++", "final_sigmas_type": "zero", "steps_offset": 1}
DPM_LU_COS = {"_class_name": "DPMSolverMultistepScheduler", "beta_schedule": "squaredcos_cap_v2",
              "num_train_timesteps": 1000, "use_lu_lambdas": True, "solver_order": 3,
              "final_sigmas_type": "sigma_min", "lambda_min_clipped": -5.1}
DPM_FLOW = {"_class_name": "DPMSolverMultistepScheduler", "num_train_timesteps": 1000,
            "use_flow_sigmas": True, "flow_shift": 3.0, "prediction_type": "flow_prediction",
            "solver_order": 2}
DPM_FLOW_DYN = {"_class_name": "DPMSolverMultistepScheduler", "num_train_timesteps": 1000,
                "use_flow_sigmas": True, "use_dynamic_shifting": True,
                "prediction_type": "flow_prediction", "solver_order": 3, "solver_type": "heun"}
DDPM_THRESH = {"_class_name": "DDPMScheduler", "beta_schedule": "linear", "beta_start": 0.0001,
               "beta_end": 0.02, "num_train_timesteps": 1000, "thresholding": True,
               "dynamic_thresholding_ratio": 0.9, "sample_max_value": 10.0}
DDIM_THRESH = {"_class_name": "DDIMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear",
               "beta_start": 0.00085, "num_train_timesteps": 1000, "steps_offset": 1,
               "set_alpha_to_one": False, "thresholding": True, "sample_max_value": 2.5,
               "prediction_type": "v_prediction"}
DPM_THRESH = {"_class_name": "DPMSolverMultistepScheduler", "beta_end": 0.012,
              "beta_schedule": "scaled_linear", "beta_start": 0.00085, "num_train_timesteps": 1000,
              "thresholding": True, "dynamic_thresholding_ratio": 0.95, "sample_max_value": 10.0}
DPM_PLAIN_THRESH = {"_class_name": "DPMSolverMultistepScheduler", "beta_schedule": "linear",
                    "beta_start": 0.0001, "beta_end": 0.02, "num_train_timesteps": 1000,
                    "algorithm_type": "dpmsolver", "final_sigmas_type": "sigma_min",
                    "thresholding": True, "dynamic_thresholding_ratio": 0.9,
                    "sample_max_value": 10.0, "prediction_type": "sample"}
EULER_CONT_V = {"_class_name": "EulerDiscreteScheduler", "beta_end": 0.012,
                "beta_schedule": "scaled_linear", "beta_start": 0.00085,
                "num_train_timesteps": 1000, "prediction_type": "v_prediction",
                "timestep_type": "continuous", "use_karras_sigmas": True,
                "timestep_spacing": "leading", "steps_offset": 1}
DPM_LEARNED = {"_class_name": "DPMSolverMultistepScheduler", "beta_schedule": "linear",
               "beta_start": 0.0001, "beta_end": 0.02, "num_train_timesteps": 1000,
               "variance_type": "learned_range", "solver_order": 2}
SD3 = {"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.29.0.dev0",
       "num_train_timesteps": 1000, "shift": 3.0}
FLUX = {"_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.30.0.dev0",
        "base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096,
        "max_shift": 1.15, "num_train_timesteps": 1000, "shift": 3.0,
        "use_dynamic_shifting": True}

EULER_BETA = {"_class_name": "EulerDiscreteScheduler", "beta_end": 0.012,
              "beta_schedule": "scaled_linear", "beta_start": 0.00085,
              "num_train_timesteps": 1000, "use_beta_sigmas": True, "steps_offset": 1,
              "timestep_spacing": "leading"}
EULER_BETA_RANGE = dict(EULER_BETA, sigma_min=0.03, sigma_max=14.6, timestep_spacing="trailing")
DPM_BETA = {"_class_name": "DPMSolverMultistepScheduler", "beta_end": 0.012,
            "beta_schedule": "scaled_linear", "beta_start": 0.00085,
            "num_train_timesteps": 1000, "use_beta_sigmas": True, "solver_order": 2,
            "algorithm_type": "dpmsolver++", "final_sigmas_type": "zero", "steps_offset": 1}
FLOW_BETA = dict(SD3, use_beta_sigmas=True)

CONFIGS = {"sd15": SD15, "sd21_v": SD21_V, "trailing_zsnr": TRAILING, "ddpm_cifar": DDPM_CIFAR,
           "ddpm_cos": DDPM_COS, "ddpm_v": DDPM_V, "euler_karras": EULER_KARRAS,
           "dpm_karras": DPM_KARRAS, "dpm_heun_v": DPM_HEUN_V, "sd3": SD3, "flux": FLUX,
           "dpm_lu": DPM_LU, "dpm_lu_cos": DPM_LU_COS, "dpm_flow": DPM_FLOW,
           "dpm_flow_dyn": DPM_FLOW_DYN, "ddpm_thresh": DDPM_THRESH, "ddim_thresh": DDIM_THRESH,
           "dpm_thresh": DPM_THRESH, "dpm_plain_thresh": DPM_PLAIN_THRESH,
           "euler_cont_v": EULER_CONT_V, "dpm_learned": DPM_LEARNED,
           "euler_beta": EULER_BETA, "euler_beta_range": EULER_BETA_RANGE,
           "dpm_beta": DPM_BETA, "flow_beta": FLOW_BETA}

# (case, config, class used (None: the file's), steps, step kwargs, generator seed, mu)
CASES = [
    ("ddpm_cifar", "ddpm_cifar", None, 10, {}, 7, None),
    ("ddpm_cos", "ddpm_cos", None, 10, {}, 8, None),
    ("ddpm_v", "ddpm_v", None, 10, {}, 9, None),
    ("ddim_sd15", "sd15", "DDIMScheduler", 10, {}, None, None),
    ("ddim_sd21_v", "sd21_v", None, 10, {}, None, None),
    ("ddim_trailing_zsnr", "trailing_zsnr", None, 10, {}, None, None),
    ("ddim_eta", "ddpm_cifar", "DDIMScheduler", 10, {"eta": 0.7}, 11, None),
    ("pndm_sd15", "sd15", None, 10, {}, None, None),
    ("pndm_sd21_v", "sd21_v", "PNDMScheduler", 10, {}, None, None),
    ("pndm_prk", "ddpm_cifar", "PNDMScheduler", 10, {}, None, None),
    ("euler_sd15", "sd15", "EulerDiscreteScheduler", 10, {}, None, None),
    ("euler_v", "sd21_v", "EulerDiscreteScheduler", 10, {}, None, None),
    ("euler_karras", "euler_karras", None, 10, {}, None, None),
    ("euler_a_sd15", "sd15", "EulerAncestralDiscreteScheduler", 10, {}, 12, None),
    ("euler_a_trailing", "trailing_zsnr", "EulerAncestralDiscreteScheduler", 10, {}, 13, None),
    ("dpm_sd15", "sd15", "DPMSolverMultistepScheduler", 10, {}, None, None),
    ("dpm_karras", "dpm_karras", None, 10, {}, None, None),
    ("dpm_heun_v", "dpm_heun_v", None, 10, {}, None, None),
    ("dpm_karras_20", "dpm_karras", None, 20, {}, None, None),
    ("flow_sd3", "sd3", None, 10, {}, None, None),
    ("flow_flux", "flux", None, 10, {}, None, 0.8),
    ("dpm_lu", "dpm_lu", None, 10, {}, None, None),
    ("dpm_lu_cos", "dpm_lu_cos", None, 12, {}, None, None),
    ("dpm_flow", "dpm_flow", None, 10, {}, None, None),
    ("dpm_flow_dyn", "dpm_flow_dyn", None, 10, {}, None, 0.8),
    ("ddpm_thresh", "ddpm_thresh", None, 10, {}, 21, None),
    ("ddim_thresh", "ddim_thresh", None, 10, {}, None, None),
    ("dpm_thresh", "dpm_thresh", None, 10, {}, None, None),
    ("dpm_plain_thresh", "dpm_plain_thresh", None, 10, {}, None, None),
    ("euler_cont_v", "euler_cont_v", None, 10, {}, None, None),
    ("dpm_learned", "dpm_learned", None, 10, {}, None, None),
    ("euler_beta", "euler_beta", None, 10, {}, None, None),
    ("euler_beta_range", "euler_beta_range", None, 7, {}, None, None),
    ("dpm_beta", "dpm_beta", None, 10, {}, None, None),
    ("dpm_beta_20", "dpm_beta", None, 20, {}, None, None),
    ("flow_beta", "flow_beta", None, 10, {}, None, None),
]

# Cases whose model has other channels than the shared latents: a learned-variance model
# outputs 6 channels for a 3-channel sample (mean, then variance), of which DPM-Solver takes
# the first 3. (latents, model outputs) from the shared ones.
CASE_INPUTS = {
    "dpm_learned": lambda lat, out: (lat[:, :3].contiguous(),
                                     torch.cat([out[:, :, :3], out[:, :, 1:4]], dim=2)),
}


def scheduler_bundle(path):
    import diffusers

    os.makedirs(os.path.join(OUT, "sched"), exist_ok=True)
    for name, cfg in CONFIGS.items():
        with open(os.path.join(OUT, "sched", name + ".json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
    b = Bundle(path)
    g = torch.Generator("cpu").manual_seed(2026)
    latents = torch.randn(SHAPE, generator=g)
    outputs = torch.randn((24,) + SHAPE, generator=g)
    b.add("latents", latents)
    b.add("model_outputs", outputs)
    gn = torch.Generator("cpu").manual_seed(2027)
    noise_x = torch.randn((3,) + SHAPE[1:], generator=gn)
    noise_n = torch.randn((3,) + SHAPE[1:], generator=gn)
    b.add("noise_x", noise_x)
    b.add("noise_n", noise_n)
    cases = []
    for name, cfg_name, cls_name, steps, kwargs, seed, mu in CASES:
        cfg = CONFIGS[cfg_name]
        file_cls = getattr(diffusers, cfg["_class_name"])
        s = file_cls.from_config(cfg)
        if cls_name is not None:  # as a pipeline swaps schedulers: from the resolved config
            s = getattr(diffusers, cls_name).from_config(s.config)
        if mu is not None:
            s.set_timesteps(steps, mu=mu)
        else:
            s.set_timesteps(steps)
        if hasattr(s, "alphas_cumprod"):
            b.add(f"{name}/alphas_cumprod", s.alphas_cumprod.to(torch.float32))
        if hasattr(s, "sigmas") and s.sigmas is not None:
            b.add(f"{name}/sigmas", torch.as_tensor(s.sigmas).to(torch.float32))
        ts = torch.as_tensor(s.timesteps)
        b.add(f"{name}/timesteps", ts.to(torch.float64))
        if hasattr(s, "add_noise"):  # a timestep per sample, as a training step noises
            tn = ts[[0, len(ts) // 2, len(ts) - 1]]
            b.add(f"{name}/add_noise_t", tn.to(torch.float64))
            b.add(f"{name}/add_noise", s.add_noise(noise_x, noise_n, tn))
            if hasattr(s, "alphas_cumprod") and not hasattr(s, "sigmas"):
                bf = s.add_noise(noise_x.bfloat16(), noise_n.bfloat16(), tn)
                b.add(f"{name}/add_noise_bf16", bf.float())
        ins = float(getattr(s, "init_noise_sigma", 1.0))  # FlowMatch has none: 1
        b.add(f"{name}/init_noise_sigma", torch.tensor([ins], dtype=torch.float64))
        gen = torch.Generator("cpu").manual_seed(seed) if seed is not None else None
        lat, outs_in = latents, outputs
        if name in CASE_INPUTS:
            lat, outs_in = CASE_INPUTS[name](latents, outputs)
            b.add(f"{name}/latents", lat)
            b.add(f"{name}/model_outputs", outs_in)
        x = lat * getattr(s, "init_noise_sigma", 1.0)
        outs = []
        for i, t in enumerate(s.timesteps):
            xin = s.scale_model_input(x, t) if hasattr(s, "scale_model_input") else x
            if i == 0:
                b.add(f"{name}/scaled_input0", xin)
            kw = dict(kwargs)
            if gen is not None:
                kw["generator"] = gen
            x = s.step(outs_in[i], t, x, **kw).prev_sample
            outs.append(x)
        b.add(f"{name}/steps", torch.stack(outs))
        cases.append({"name": name, "config": cfg_name, "class": type(s).__name__,
                      "steps": steps, "seed": -1 if seed is None else seed,
                      "eta": kwargs.get("eta", 0.0), "mu": mu})
    b.meta = {"cases": cases, "diffusers": diffusers.__version__}
    n, nb = b.write()
    print(f"schedulers: {n} tensors, {nb} bytes")


def main():
    if "ATEN_CPU_CAPABILITY" not in os.environ and platform.machine() == "x86_64":
        env = dict(os.environ, ATEN_CPU_CAPABILITY="avx2")
        subprocess.run([sys.executable, __file__] + sys.argv[1:], env=env, check=True)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--rng":
        rng_bundle(sys.argv[2])
        return
    os.makedirs(OUT, exist_ok=True)
    rng_bundle(os.path.join(OUT, "torch_randn"))
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    subprocess.run([sys.executable, __file__, "--rng", os.path.join(OUT, "torch_randn_default")],
                   env=env, check=True)
    scheduler_bundle(os.path.join(OUT, "schedulers"))


if __name__ == "__main__":
    main()
