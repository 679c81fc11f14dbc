"""Diffusion pipelines from Python in diffusers' shape:

    pipe = ember.DiffusionPipeline.from_pretrained("ddpm-cifar10-32/")
    pipe.to("xla:0")                         # optional, as pipe.to("cuda")
    pipe.set_scheduler("ddim")               # optional, as DDIMScheduler.from_config(...)
    image = pipe(num_inference_steps=50, generator=42, output_type="np").images[0]

`generator` is a seed (or a torch.Generator whose initial_seed() is used): the initial latents
and every per-step noise are torch.Generator("cpu").manual_seed(seed)'s draws, so the image is
the one diffusers makes with that generator. The pipelines are those of include/ember/diffusion.h
(DDPMPipeline, DDIMPipeline with UNet2DModel; StableDiffusionPipeline, SDXL,
StableDiffusion3Pipeline and FluxPipeline; DiTPipeline):

    sd = ember.DiffusionPipeline.from_pretrained("sd15/")
    sd.enable_vae_tiling()                   # optional, as pipe.vae.enable_tiling()
    sd.enable_vae_slicing()                  # optional, as pipe.vae.enable_slicing()
    image = sd(prompt="a photo of a cat", negative_prompt="blurry", guidance_scale=7.5,
               num_inference_steps=25, generator=0).images[0]
    images = sd(prompt=["a cat", "a dog"], num_images_per_prompt=2, generator=0).images  # 4
    init = sd(prompt="a castle", image=image[None], strength=0.6).images[0]   # image to image
    sd3 = ember.DiffusionPipeline.from_pretrained("sd3-medium/")   # with or without its T5
    image = sd3(prompt="a photo of a cat", guidance_scale=7.0, num_inference_steps=28,
                max_sequence_length=256, generator=0).images[0]
    flux = ember.DiffusionPipeline.from_pretrained("FLUX.1-dev/")
    image = flux(prompt="a photo of a cat", guidance_scale=3.5, num_inference_steps=28,
                 height=1024, width=1024, max_sequence_length=512, generator=0).images[0]
    dit = ember.DiffusionPipeline.from_pretrained("DiT-XL-2-256/")
    image = dit(class_labels=[207], guidance_scale=4.0, generator=0).images[0]

The conditioning arguments are keyword-only; a pipeline refuses the ones that are not its own
(EmberError naming them), as the C API does."""
from ._ffi import ffi, lib
from . import Tensor, _check, _ctx, _dtype, _raise, tensor

_SCHEDULERS = ("ddpm", "ddim", "pndm", "euler", "euler-a", "dpm++2m", "flow-euler")


class ImagePipelineOutput:
    """`images`: a numpy array [B, H, W, C] in [0, 1] (output_type "np"), or a list of PIL
    images (output_type "pil")."""

    def __init__(self, images):
        self.images = images


def _seed(generator):
    if generator is None:
        return 0
    if isinstance(generator, int):
        return generator
    if hasattr(generator, "initial_seed"):  # a torch.Generator made with manual_seed(seed)
        return int(generator.initial_seed())
    raise TypeError("generator: an int seed or a torch.Generator")


class DiffusionPipeline:
    """A diffusers pipeline folder (model_index.json and its components)."""

    def __init__(self, ptr):
        self._p = ffi.gc(ptr, lib.em_pipeline_free)
        self._vae_tiling = False
        self._vae_slicing = False

    @classmethod
    def from_pretrained(cls, path, device=None, torch_dtype=None):
        """torch_dtype: None or float32 (the default), bfloat16 or float16 (a name, or a
        torch.dtype): the denoiser's and the VAE's weights and activations, as diffusers'
        torch_dtype (the text encoders, the latents and the scheduler stay float32)."""
        c = _ctx()
        o = ffi.new("em_pipeline_options *", lib.em_pipeline_default_options())
        keep = ffi.new("char[]", device.encode()) if device else None
        if keep is not None:
            o.device = keep
        if torch_dtype is not None:
            o.dtype = _dtype(torch_dtype)
        return cls(_check(c, lib.em_pipeline_load(c, str(path).encode(), o)))

    @property
    def device(self):
        return ffi.string(lib.em_device_name(lib.em_pipeline_device(self._p))).decode()

    @property
    def class_name(self):
        return ffi.string(lib.em_pipeline_get_index(self._p).class_name).decode()

    @property
    def scheduler(self):
        """The scheduler's diffusers class name ("DDPMScheduler", ...)."""
        k = lib.em_scheduler_get_kind(lib.em_pipeline_scheduler(self._p))
        return ffi.string(lib.em_scheduler_kind_class(k)).decode()

    def to(self, device):
        c = _ctx()
        if lib.em_pipeline_to(c, self._p, str(device).encode()) != 0:
            _raise(c)
        return self

    def set_scheduler(self, name):
        """Replaces the scheduler with another class from the current one's config, as
        `pipe.scheduler = XScheduler.from_config(pipe.scheduler.config)`: one of ddpm, ddim,
        pndm, euler, euler-a, dpm++2m, flow-euler."""
        kind = ffi.new("em_scheduler_kind *")
        if not lib.em_scheduler_kind_parse(str(name).encode(), kind):
            raise ValueError(f"scheduler {name!r}: one of {', '.join(_SCHEDULERS)}")
        c = _ctx()
        if lib.em_pipeline_set_scheduler(c, self._p, kind[0]) != 0:
            _raise(c)
        return self

    def enable_vae_tiling(self):
        """Decode with the VAE in tiles from now on, as `pipe.vae.enable_tiling()` (Stable
        Diffusion and DiT; a pipeline without a VAE refuses it when run)."""
        self._vae_tiling = True
        return self

    def disable_vae_tiling(self):
        self._vae_tiling = False
        return self

    def enable_vae_slicing(self):
        """Decode a batch with the VAE one image at a time from now on, as
        `pipe.vae.enable_slicing()` (the same images; a pipeline without a VAE refuses it)."""
        self._vae_slicing = True
        return self

    def disable_vae_slicing(self):
        self._vae_slicing = False
        return self

    def __call__(self, num_inference_steps=None, generator=None, eta=0.0, latents=None,
                 output_type="np", callback=None, *, prompt=None, negative_prompt=None,
                 guidance_scale=None, height=None, width=None, class_labels=None, image=None,
                 strength=None, num_images_per_prompt=1, mask_image=None, aesthetic_score=None,
                 negative_aesthetic_score=None, prompt_embeds=None, negative_prompt_embeds=None,
                 denoising_start=None, denoising_end=None, pooled_prompt_embeds=None,
                 negative_pooled_prompt_embeds=None, prompt_2=None, negative_prompt_2=None,
                 max_sequence_length=None):
        """The denoising loop; `callback(step, timestep, seconds)` after each step (return False
        to stop: EmberError). `generator`: an int seed, a torch.Generator made with manual_seed,
        or a list of them (one per image of the batch, as diffusers takes). `latents` (numpy, torch or ember, f32, the pipeline's latent shape)
        replaces the drawn initial noise. Stable Diffusion: `prompt` (required; a string or a
        list), `negative_prompt` (of the same kind), `height`, `width`, `num_images_per_prompt`
        (the images of all prompts denoised as one batch, as diffusers does; `latents` then has
        the batch's rows); DiT: `class_labels` (an int or a list: one image per label, denoised
        as one batch);
        both: `guidance_scale` (None: the pipeline's default, 7.5 or 4.0; <= 1: no guidance).
        Stable Diffusion image to image (StableDiffusionImg2ImgPipeline): `image`, f32 [H, W, 3]
        or [1, H, W, 3] in [0, 1] (numpy, torch or ember; a PIL image is scaled by 1/255), and
        `strength` (None: 0.8; SDXL 0.3; inpainting 1.0). Inpainting
        (StableDiffusionInpaintPipeline): `mask_image` with `image`, f32 [H, W], [1, H, W] or
        [1, H, W, 1] in [0, 1], white repainted (a PIL image is made grey with convert("L")).
        An SDXL refiner (requires_aesthetics_score): `aesthetic_score`, `negative_aesthetic_score`
        (None: 6.0 and 2.5). Stable Diffusion: `prompt_embeds` [n, L, D] instead of `prompt`, and
        `negative_prompt_embeds` of the same shape (else the negative prompt is encoded); SDXL
        with `pooled_prompt_embeds` (and `negative_pooled_prompt_embeds`) beside them.
        SDXL's base-to-refiner hand-over: `denoising_end` with output_type="latent" (the latents
        [B, C, h, w] are returned as .images), then the refiner with those latents as `image`
        (4 channels, NCHW) and `denoising_start`. SDXL and SD3: `prompt_2`, `negative_prompt_2`
        (strings: the second text encoder's texts; None or "": the first ones). SD3:
        `max_sequence_length` (None: 256), the zero T5 tokens after CLIP's. Flux: `prompt`
        (CLIP), `prompt_2` (the T5's text; None: `prompt`), `guidance_scale` (None: 3.5) the
        guidance embedded in a guidance_embeds transformer (FLUX.1-dev; no classifier-free
        guidance: negative prompts are refused), `max_sequence_length` (None: 512) the T5's
        tokens, `latents` packed [B, H W / 4, 4C] as diffusers takes them (or [B, C, H, W])."""
        c = _ctx()
        rp = ffi.new("em_pipeline_run_params *", lib.em_pipeline_default_params())
        rp.steps = num_inference_steps or 0
        rp.eta = eta
        seeds = None
        if isinstance(generator, (list, tuple)):  # a generator per image, as diffusers takes
            if not generator:
                raise ValueError("generator: an empty list")
            seeds = ffi.new("uint64_t[]", [_seed(g) for g in generator])
            rp.seeds, rp.num_seeds = seeds, len(generator)
        else:
            rp.seed = _seed(generator)
        rp.vae_tiling = self._vae_tiling
        rp.vae_slicing = self._vae_slicing
        if isinstance(num_images_per_prompt, bool) or not isinstance(num_images_per_prompt, int):
            raise TypeError("num_images_per_prompt: an int")
        if num_images_per_prompt < 1:
            raise ValueError(f"num_images_per_prompt {num_images_per_prompt}: 1 or more")
        rp.num_images_per_prompt = num_images_per_prompt  # the C side checks the batch's size
        keep = []  # the C strings live until the run returns
        for field, text in (("prompt", prompt), ("negative_prompt", negative_prompt)):
            if text is None:
                continue
            if isinstance(text, str):
                keep.append(ffi.new("char[]", text.encode()))
                setattr(rp, field, keep[-1])
                continue
            texts = list(text)
            if not texts or not all(isinstance(t, str) for t in texts):
                raise TypeError(f"{field}: a string or a non-empty list of strings")
            keep.extend(ffi.new("char[]", t.encode()) for t in texts)
            keep.append(ffi.new("char *[]", keep[-len(texts):]))
            if field == "prompt":
                rp.prompts, rp.num_prompts = keep[-1], len(texts)
            else:
                if not isinstance(prompt, (list, tuple)) or len(texts) != len(prompt):
                    raise ValueError("negative_prompt: a list needs a list of prompts of the "
                                     "same length")
                rp.negative_prompts = keep[-1]
        for field, text in (("prompt_2", prompt_2), ("negative_prompt_2", negative_prompt_2)):
            if text is not None:
                if not isinstance(text, str):
                    raise TypeError(f"{field}: a string")
                keep.append(ffi.new("char[]", text.encode()))
                setattr(rp, field, keep[-1])
        if max_sequence_length is not None:
            rp.max_sequence_length = int(max_sequence_length)
        if guidance_scale is not None:
            # 0 means "the pipeline's default" to the C API; an explicit 0 is no guidance
            rp.guidance_scale = float(guidance_scale) if guidance_scale > 0 else 1.0
        rp.height = height or 0
        rp.width = width or 0
        if class_labels is not None:
            labels = [class_labels] if isinstance(class_labels, int) else list(class_labels)
            if not labels or not all(isinstance(x, int) and not isinstance(x, bool)
                                     for x in labels):
                raise TypeError("class_labels: an int or a non-empty list of ints")
            if len(labels) == 1:
                rp.class_label = labels[0]
            else:  # one batched run: the latents drawn together, as diffusers' DiTPipeline
                keep.append(ffi.new("int64_t[]", labels))
                rp.class_labels, rp.num_class_labels = keep[-1], len(labels)
        lat = None
        if latents is not None:
            lat = latents if isinstance(latents, Tensor) else tensor(latents, dtype="f32")
            rp.latents = lat._t
        init = None
        if image is not None and hasattr(image, "shape") and len(image.shape) == 4 \
                and image.shape[-1] != 3:  # latents as the image (NCHW), diffusers' hand-over
            init = image if isinstance(image, Tensor) else tensor(image, dtype="f32")
            rp.image_latents = init._t
            image = None
        if image is not None:
            if not isinstance(image, Tensor):
                import numpy as np
                if not hasattr(image, "shape"):  # a PIL image
                    image = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
                image = np.asarray(image, dtype=np.float32)
                image = tensor(image[None] if image.ndim == 3 else image, dtype="f32")
            init = image
            rp.image = init._t
        embeds = []
        for field, value in (("prompt_embeds", prompt_embeds),
                             ("negative_prompt_embeds", negative_prompt_embeds),
                             ("pooled_prompt_embeds", pooled_prompt_embeds),
                             ("negative_pooled_prompt_embeds", negative_pooled_prompt_embeds)):
            if value is not None:
                embeds.append(value if isinstance(value, Tensor) else tensor(value, dtype="f32"))
                setattr(rp, field, embeds[-1]._t)
        mask = None
        if mask_image is not None:
            if not isinstance(mask_image, Tensor):
                import numpy as np
                if not hasattr(mask_image, "shape"):  # a PIL image, as the mask processor reads it
                    mask_image = np.asarray(mask_image.convert("L"), dtype=np.float32) / 255.0
                m = np.asarray(mask_image, dtype=np.float32)
                if m.ndim == 4 and m.shape[-1] == 1:
                    m = m[..., 0]
                mask_image = tensor(m[None] if m.ndim == 2 else m, dtype="f32")
            mask = mask_image
            rp.mask_image = mask._t
        if strength is not None:
            rp.strength = float(strength)
        if denoising_start is not None:
            rp.denoising_start = float(denoising_start)
        if denoising_end is not None:
            rp.denoising_end = float(denoising_end)
        if output_type not in ("np", "pil", "latent"):
            raise ValueError(f"output_type {output_type!r}: 'np', 'pil' or 'latent'")
        rp.output_latents = output_type == "latent"
        if aesthetic_score is not None:
            rp.aesthetic_score = float(aesthetic_score)
        if negative_aesthetic_score is not None:
            rp.negative_aesthetic_score = float(negative_aesthetic_score)
        cb = None
        if callback is not None:
            def progress(user, i, n, t, seconds):
                return callback(i, t, seconds) is not False
            cb = ffi.callback("bool(void *, int64_t, int64_t, double, double)", progress)
            rp.progress = cb
        lib.em_scope_push(c)
        try:
            img = lib.em_pipeline_run(c, self._p, rp)
            if img == ffi.NULL:
                _raise(c)
            out = Tensor._adopt(c, img).numpy()
        finally:
            lib.em_scope_pop(c)
        if output_type in ("np", "latent"):
            return ImagePipelineOutput(out)
        if output_type == "pil":
            from PIL import Image
            return ImagePipelineOutput([Image.fromarray((im * 255).round().astype("uint8"))
                                        for im in out])
        raise ValueError(f"output_type {output_type!r}: 'np' or 'pil'")


DDPMPipeline = DiffusionPipeline
DDIMPipeline = DiffusionPipeline
