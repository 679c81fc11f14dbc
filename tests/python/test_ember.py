"""The Python package against the same references as the C suite: transformers' logits and
greedy tokens for the tiny checkpoints, `tokenizers`' ids, numpy for tensor arithmetic.
Run by scripts/test-python.sh in a fresh venv after `pip install .`."""
import json
import os
import sys
import threading

import numpy as np
import pytest

import ember

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FX = os.path.join(ROOT, "tests", "fixtures")


def bundle(name):
    """A reference bundle (NAME_ref.json + .bin) written by scripts/gen_model_fixtures.py."""
    meta = json.load(open(os.path.join(FX, "models", name + "_ref.json")))
    raw = open(os.path.join(FX, "models", name + "_ref.bin"), "rb").read()
    kinds = {"f32": np.float32, "i64": np.int64}
    out = {}
    for k, t in meta["tensors"].items():
        a = np.frombuffer(raw[t["offset"]:t["offset"] + t["nbytes"]], dtype=kinds[t["dtype"]])
        out[k] = a.reshape(t["shape"])
    return out


def test_version_and_ops_table():
    assert ember.version()
    names = dir(ember.ops)
    for op in ("add", "matmul", "softmax", "rms_norm", "embedding", "cast", "reshape"):
        assert op in names, op


def test_tensor_numpy_round_trip_and_arithmetic():
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    b = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    ea, eb = ember.tensor(a), ember.tensor(b)
    assert ea.shape == (3, 4) and ea.dtype == "f32" and ea.device == "cpu"
    np.testing.assert_array_equal(ea.numpy(), a)
    np.testing.assert_allclose((ea @ eb).numpy(), a @ b, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose((ea * 2 - 1).numpy(), a * 2 - 1, rtol=1e-6)
    np.testing.assert_allclose((ea / (ea + 1)).numpy(), a / (a + 1), rtol=1e-6)
    assert ember.tensor([[1, 2], [3, 4]]).dtype == "i64"
    assert ember.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    bf = ember.tensor(a, dtype="bfloat16")
    assert bf.dtype == "bf16"
    np.testing.assert_allclose(bf.numpy(), a, rtol=1e-2)


def test_errors_carry_embers_message():
    with pytest.raises(ember.EmberError) as e:
        ember.tensor(np.ones((2, 3), np.float32)) @ ember.tensor(np.ones((2, 3), np.float32))
    assert "matmul" in str(e.value) and "[2,3]" in str(e.value)
    assert "test_ember.py:" in str(e.value)  # the Python caller's line, as C gets its own
    with pytest.raises(ember.EmberError) as e:
        ember.AutoModelForCausalLM.from_pretrained(os.path.join(FX, "no_such_model"), offline=True)
    assert "no_such_model" in str(e.value)
    with pytest.raises(ValueError):
        ember.tensor([[1, 2], [3]])
    with pytest.raises(TypeError):
        ember.ops.add(ember.tensor([1.0]))


@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen3_moe"])
def test_logits_and_greedy_match_transformers(family):
    ref = bundle(family)
    model = ember.AutoModelForCausalLM.from_pretrained(os.path.join(FX, "models", family))
    assert set(model.hf_device_map.values()) == {"cpu"}
    logits = model(ember.tensor(ref["ids"])).logits
    assert logits.shape == ref["logits_f32"].shape
    np.testing.assert_allclose(logits.numpy(), ref["logits_f32"], atol=1e-4, rtol=1e-4)
    prompt = ref["ids"][:1]
    out = model.generate(prompt, max_new_tokens=len(ref["greedy"]), do_sample=False,
                         repetition_penalty=1.0, eos_token_id=[])
    assert out[0][:prompt.shape[1]] == prompt[0].tolist()
    assert out[0][prompt.shape[1]:] == ref["greedy"].tolist()


def test_left_padded_batch():
    ref = bundle("qwen3")
    model = ember.AutoModelForCausalLM.from_pretrained(os.path.join(FX, "models", "qwen3"))
    n = ref["batch_greedy"].shape[1]
    out = model.generate(ref["batch_ids"], attention_mask=ref["batch_mask"], max_new_tokens=n,
                         do_sample=False, repetition_penalty=1.0, eos_token_id=[])
    for row, want in zip(out, ref["batch_greedy"]):
        assert row[ref["batch_ids"].shape[1]:] == want.tolist()


def test_streaming_and_threads():
    model = ember.AutoModelForCausalLM.from_pretrained(os.path.join(FX, "models", "qwen3"))

    class Collect:
        def __init__(self):
            self.ids, self.ended = [], False

        def put(self, ids):
            self.ids += list(ids)

        def end(self):
            self.ended = True

    s = Collect()
    alone = model.generate([[5, 6, 7, 8]], max_new_tokens=8, do_sample=False, eos_token_id=[],
                           streamer=s)
    assert s.ended and s.ids == alone[0][4:]
    results = [None, None]

    def work(k):
        results[k] = model.generate([[5, 6, 7, 8]], max_new_tokens=8, do_sample=False,
                                    eos_token_id=[])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results[0] == alone and results[1] == alone


def test_generated_nul_byte_kept(tmp_path):
    """A generated token whose text is a NUL byte (byte-level tokenizers have one): the streamer
    gets ids, as transformers' streamers do (generate's callback passes no text), and
    Tokenizer.decode gives them back with the "\\0", the C text taken with its length. The
    tokenizer is check_generate.py's byte-level one, byte 0 mapped to the first greedy id."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from check_generate import byte_tokenizer
    src = os.path.join(FX, "models", "qwen3")
    model = ember.AutoModelForCausalLM.from_pretrained(src)

    class Collect:
        ids = []

        def put(self, ids):
            self.ids = self.ids + list(ids)

    s = Collect()
    out = model.generate([[97, 98, 99]], max_new_tokens=3, do_sample=False, eos_token_id=[],
                         streamer=s)
    first = out[0][3]
    assert 0 < first < 256 and first not in (97, 98, 99), f"first greedy id {first}"
    for f in os.listdir(src):
        os.symlink(os.path.join(src, f), tmp_path / f)
    byte_tokenizer(str(tmp_path / "tokenizer.json"), first)
    tok = ember.AutoTokenizer.from_pretrained(str(tmp_path))
    assert s.ids == out[0][3:]
    text = tok.decode(s.ids)
    assert text[0] == "\0" and len(text) > 1, repr(text)
    assert tok.decode(s.ids[:1]) == "\0"


@pytest.mark.parametrize("name", ["bpe_llama3_style", "bpe_gemma_style", "post_bert"])
def test_tokenizer_ids_match_tokenizers(name):
    texts = json.load(open(os.path.join(FX, "tokenizers", "texts.json")))
    exp = json.load(open(os.path.join(FX, "tokenizers", "expected", name + ".json")))
    tok = ember.AutoTokenizer.from_pretrained(os.path.join(FX, "tokenizers", name + ".json"))
    for case in exp["cases"]:
        text = texts[int(case["text"])]["text"]
        assert tok.encode(text, add_special_tokens=False) == case["ids"], (name, text[:40])
        ids = tok.encode(text)
        assert ids == case["special_prefix"] + case["ids"] + case["special_suffix"]
        assert tok(text)["input_ids"] == ids
        assert tok.decode(ids) == case["decoded"]
        assert tok.decode(ids, skip_special_tokens=True) == case["decoded_skip"]
    batch = tok(["a b", "a b c d"], padding=True)
    assert len(batch["input_ids"][0]) == len(batch["input_ids"][1])
    assert batch["attention_mask"][0][0] == 0  # left padding, for generation


def test_examples_run():
    import subprocess
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "eager.py")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "predicted classes: [" in r.stdout and "as expected: shape error: matmul" in r.stdout
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "compile.py")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "6 calls, 2 compiles (last: input 0 dim 0: 4 -> 8)" in r.stdout


def test_train_example_runs(tmp_path):
    import subprocess
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", "train.py"),
                        os.path.join(FX, "models", "qwen3"), os.path.join(FX, "train", "ids.npy"),
                        str(tmp_path / "out"), "10"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "validation loss" in r.stdout and "generated ids: [5, 6, 7," in r.stdout
    assert (tmp_path / "out" / "model.safetensors").exists()


def test_gguf_tokenizer_and_model():
    path = os.path.join(FX, "gguf", "model_llama.gguf")
    if not os.path.exists(path):
        pytest.skip("no GGUF model fixture")
    model = ember.AutoModelForCausalLM.from_pretrained(path)
    assert model([[1, 2, 3]]).logits.shape[:2] == (1, 3)


def data_ptr(t):
    return int(ember.ffi.cast("uintptr_t", ember.lib.em_tensor_data(ember._ctx(), t._t)))


def test_dlpack_numpy_zero_copy_both_ways():
    import gc
    from ember import _dlpack
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = ember.from_dlpack(a)
    assert t.shape == (3, 4) and t.dtype == "f32" and data_ptr(t) == a.ctypes.data
    a[0, 0] = 42.0  # the same memory
    assert t.numpy()[0, 0] == 42.0
    b = np.from_dlpack(t)
    assert b.ctypes.data == a.ctypes.data
    e = ember.tensor([[1.5, 2.5], [3.5, 4.5]])
    n = np.from_dlpack(e)
    assert n.ctypes.data == data_ptr(e)
    del e
    gc.collect()
    np.testing.assert_array_equal(n, [[1.5, 2.5], [3.5, 4.5]])  # the export keeps it alive
    for dt in (np.int64, np.int32, np.int8, np.uint8, np.float64, np.float16, np.bool_):
        x = (np.arange(6) % 2).astype(dt).reshape(2, 3)
        np.testing.assert_array_equal(np.from_dlpack(ember.from_dlpack(x)), x)
    ro = np.arange(4, dtype=np.int64)
    ro.flags.writeable = False
    r = ember.from_dlpack(ro)  # read-only memory is copied (Ember tensors are writable)
    assert r.tolist() == [0, 1, 2, 3] and data_ptr(r) != ro.ctypes.data
    s = np.arange(12, dtype=np.float32).reshape(3, 4).T  # a strided view is copied
    np.testing.assert_array_equal(ember.from_dlpack(s).numpy(), s)
    c = ember.from_dlpack(a, copy=True)
    assert data_ptr(c) != a.ctypes.data
    with pytest.raises(TypeError):
        ember.from_dlpack(object())
    del t, b, n, c, r
    gc.collect()
    assert not _dlpack._live and not _dlpack._imported  # every deleter ran


def test_dlpack_torch_when_installed():
    torch = pytest.importorskip("torch")
    x = ember.tensor([[1.0, 2.0], [3.0, 4.0]])
    tt = torch.from_dlpack(x)
    assert tt.data_ptr() == data_ptr(x)
    bf = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    eb = ember.from_dlpack(bf)
    assert eb.dtype == "bf16" and data_ptr(eb) == bf.data_ptr()
    np.testing.assert_array_equal(eb.numpy(), bf.float().numpy())


def test_encoder_matches_transformers():
    ref = bundle("bert")
    model = ember.AutoModel.from_pretrained(os.path.join(FX, "models", "bert"))
    h = model(ref["ids"], attention_mask=ref["mask"]).last_hidden_state
    np.testing.assert_allclose(h.numpy(), ref["hidden"], atol=1e-4, rtol=1e-4)
    with pytest.raises(ember.EmberError) as e:
        ember.AutoModel.from_pretrained(os.path.join(FX, "models", "qwen3"))
    assert "AutoModelForCausalLM" in str(e.value)


def test_sentence_embeddings_match_sentence_transformers():
    d = os.environ.get("EMBER_MINILM_DIR")
    if not d or not os.path.isdir(d):
        pytest.skip("EMBER_MINILM_DIR unset: all-MiniLM-L6-v2 is fetched by scripts/fetch_minilm.sh")
    meta = json.load(open(os.path.join(FX, "minilm", "reference.json")))
    raw = open(os.path.join(FX, "minilm", "reference.bin"), "rb").read()
    t = meta["tensors"]["embeddings"]
    want = np.frombuffer(raw[t["offset"]:t["offset"] + t["nbytes"]], np.float32).reshape(t["shape"])
    texts = open(os.path.join(FX, "minilm", "sentences.txt")).read().splitlines()[:want.shape[0]]
    got = ember.SentenceTransformer(d).encode(texts)
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_compile_traces_once_per_shape():
    w = ember.tensor(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4))

    def mlp(x):
        return ember.ops.softmax(ember.ops.linear(x, w, None), -1)

    f = ember.compile(mlp)
    x = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    for _ in range(3):
        y = f(x)
    np.testing.assert_allclose(y.numpy(), mlp(ember.tensor(x)).numpy(), rtol=1e-6, atol=1e-7)
    st = f.stats()
    assert st["compiles"] == 1 and st["calls"] == 3
    f(np.ones((5, 4), np.float32))
    assert f.stats()["compiles"] == 2
    with pytest.raises(ember.EmberError) as e:
        ember.compile(lambda x: ember.tensor(x.numpy()))(x)
    assert "compiled function cannot read" in str(e.value)
    with pytest.raises(ZeroDivisionError):
        ember.compile(lambda x: 1 / 0)(x)


def test_stub_lists_every_op():
    pyi = os.path.join(os.path.dirname(ember.__file__), "__init__.pyi")
    assert os.path.exists(os.path.join(os.path.dirname(ember.__file__), "py.typed"))
    import ast
    tree = ast.parse(open(pyi).read())
    ops = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_Ops")
    names = {f.name for f in ops.body if isinstance(f, ast.FunctionDef)}
    assert names == set(dir(ember.ops))
    public = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    public |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    public |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
               if isinstance(t, ast.Name)}
    assert set(ember.__all__) <= public


def test_no_python_memory_growth():
    import gc
    import tracemalloc
    a = np.ones((16, 16), np.float32)

    def work():
        for _ in range(200):
            t = ember.tensor(a)
            (t @ t + 1).numpy()
            np.from_dlpack(ember.from_dlpack(a))

    work()  # warm caches (the op functions, file-name strings)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    work()
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert grown < 64 * 1024, f"{grown} bytes of Python memory kept by 200 rounds"


def _cpu_bytes_in_use():
    from ember._ffi import ffi, lib
    c = ember._ctx()
    d = lib.em_device_get(c, b"cpu")
    v = ffi.new("int64_t[2]")
    lib.em_device_memory_stats(d, v, v + 1)
    return v[0]


def test_no_ember_memory_kept(tmp_path):
    """Ember's own memory: the CPU device's bytes in use come back to where they were once the
    models, tensors, DLPack exchanges, trainers and pipelines of a round are dropped (a tensor, a weight or an
    optimizer moment that a Python object failed to free would stay counted)."""
    import gc
    a = np.ones((32, 32), np.float32)
    ids = np.load(os.path.join(FX, "train", "ids.npy"))

    def work():
        for _ in range(20):
            t = ember.tensor(a)
            (t @ t + 1).numpy()
            np.from_dlpack(ember.from_dlpack(a))
        m = ember.AutoModelForCausalLM.from_pretrained(os.path.join(FX, "models", "qwen3"))
        m.generate([[5, 6, 7]], max_new_tokens=4, do_sample=False)
        m([[5, 6, 7]]).logits.numpy()
        tr = ember.Trainer(m, ids, seq_len=16, batch_size=2, max_steps=2)
        tr.train()
        tr.save_model(tmp_path / "m")
        f = ember.compile(lambda x: ember.ops.silu(x) * 2)
        f(ember.tensor(a)).numpy()
        p = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "ddim_three"))
        p(num_inference_steps=2, generator=1)

    work()  # warm whatever is cached once (the compile cache, file names)
    gc.collect()
    before = _cpu_bytes_in_use()
    work()
    gc.collect()
    assert _cpu_bytes_in_use() == before


def test_trainer_matches_torch_and_resumes(tmp_path):
    """10 AdamW steps (warmup, cosine, clipping) give the losses, learning rates and grad norms
    torch recorded (scripts/gen_train_run_fixtures.py); a run saved at step 5 and resumed prints
    the same numbers; the saved folder loads for generation."""
    meta = json.load(open(os.path.join(FX, "train", "qwen3_run.json")))["meta"]
    ids = np.load(os.path.join(FX, "train", "ids.npy"))
    kw = dict(seq_len=meta["seq_len"], batch_size=meta["batch"], max_steps=meta["steps"],
              learning_rate=meta["lr"], lr_scheduler_type=meta["schedule"],
              warmup_steps=meta["warmup"], weight_decay=meta["weight_decay"],
              adam_beta1=meta["beta1"], adam_beta2=meta["beta2"], adam_epsilon=meta["eps"],
              max_grad_norm=meta["grad_clip"], shuffle=False)
    model = ember.AutoModelForCausalLM.from_pretrained(os.path.join(FX, "models", "qwen3"))
    trainer = ember.Trainer(model, ids, **kw)  # ids from numpy
    steps = []
    for s in trainer:
        steps.append(s)
        if s.step == 4:
            trainer.save_model(tmp_path / "ck5")
    assert [s.step for s in steps] == list(range(meta["steps"]))
    for s, loss, lr, norm in zip(steps, meta["losses"], meta["lrs"], meta["grad_norms"]):
        assert abs(s.loss - loss) <= 1e-5, (s, loss)
        assert abs(s.learning_rate - lr) <= 1e-12 * max(1.0, abs(lr)), (s, lr)
        assert abs(s.grad_norm - norm) <= 1e-5 * abs(norm), (s, norm)
    # the trained weights are the model's: generation runs on them
    out = model.generate([[5, 6, 7]], max_new_tokens=3, do_sample=False)
    assert len(out[0]) == 6
    resumed = ember.AutoModelForCausalLM.from_pretrained(tmp_path / "ck5")
    t2 = ember.Trainer(resumed, os.path.join(FX, "train", "ids.npy"), **kw)  # ids from a path
    t2.resume_from_checkpoint(tmp_path / "ck5")
    assert t2.steps_done == 5
    again = t2.train()
    assert [(s.loss, s.grad_norm) for s in again] == [(s.loss, s.grad_norm) for s in steps[5:]]


def test_trainer_errors():
    model = ember.AutoModelForCausalLM.from_pretrained(os.path.join(FX, "models", "qwen3"))
    with pytest.raises(ember.EmberError, match="window"):
        ember.Trainer(model, list(range(3, 10)), seq_len=16, max_steps=1)
    with pytest.raises(ember.EmberError, match="vocabulary"):
        ember.Trainer(model, [5] * 40 + [10 ** 6], seq_len=16, max_steps=1)
    with pytest.raises(ValueError, match="lr_scheduler_type"):
        ember.Trainer(model, list(range(64)), seq_len=16, max_steps=1, lr_scheduler_type="linear")


def _diffusion_bundle(name):
    """A bundle of tests/fixtures/diffusion/ (scripts/gen_diffusion_fixtures.py, diffusers)."""
    d = os.path.join(FX, "diffusion")
    meta = json.load(open(os.path.join(d, name + ".json")))
    raw = open(os.path.join(d, name + ".bin"), "rb").read()
    kinds = {"f32": np.float32, "i64": np.int64}
    out = {k: np.frombuffer(raw[t["offset"]:t["offset"] + t["nbytes"]], dtype=kinds[t["dtype"]])
           .reshape(t["shape"]) for k, t in meta["tensors"].items()}
    return meta["meta"], out


def test_diffusion_pipelines_match_diffusers():
    """DDIMPipeline from the committed latents, seeded DDPM (per-step noise from the generator),
    DDIM with eta and a scheduler swapped in: diffusers' images (output_type="np") within 1e-3."""
    _, ref = _diffusion_bundle("ddim_three_ref")
    pipe = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "ddim_three"))
    assert pipe.class_name == "DDIMPipeline" and pipe.scheduler == "DDIMScheduler"
    meta, _ = _diffusion_bundle("ddim_three_ref")
    img = pipe(num_inference_steps=meta["inference_steps"], latents=ref["latents"]).images
    assert img.shape == ref["image"].shape
    np.testing.assert_allclose(img, ref["image"], atol=1e-3)
    runs, imgs = _diffusion_bundle("pipeline_runs_ref")
    names = {"DDIMScheduler": "ddim", "EulerDiscreteScheduler": "euler",
             "EulerAncestralDiscreteScheduler": "euler-a"}
    for name in ("ddpm_seeded_small", "ddim_eta1_seeded", "ddpm_as_euler_a"):
        r = runs["runs"][name]
        p = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", r["folder"]))
        if r["scheduler"] != p.scheduler:
            p.set_scheduler(names[r["scheduler"]])
        seen = []
        out = p(num_inference_steps=r["steps"], generator=r["seed"], eta=r["eta"],
                callback=lambda i, t, s: seen.append(i)).images
        np.testing.assert_allclose(out, imgs[name + "_image"], atol=1e-3, err_msg=name)
        assert seen == list(range(r["steps"]))


def test_diffusion_pipeline_torch_dtype():
    """from_pretrained(torch_dtype=torch.bfloat16 / "float16"): the denoiser and the VAE in half
    precision, within 2 x (diffusers' own half-vs-f32 gap) + 0.005 of diffusers' image with the
    same torch_dtype, and not the f32 image (scripts/gen_pipeline_dtype_fixtures.py)."""
    meta, ref = _diffusion_bundle("pipeline_dtype_ref")
    for name, dtype in (("sd_bf16", "bfloat16"), ("ddim_f16", "torch.float16")):
        r = meta["runs"][name]
        p = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", r["folder"]),
                                                    torch_dtype=dtype)
        kw = dict(prompt=r["cond"], guidance_scale=r["guidance"], height=r["size"],
                  width=r["size"]) if r["cond"] else {}
        out = p(num_inference_steps=r["steps"], latents=ref[name + "_latents"], **kw).images
        assert np.abs(out - ref[name + "_image"]).max() <= 2 * r["gap_to_f32"] + 0.005, name
        assert np.abs(out - ref[name + "_f32"]).max() > 1e-3, name
    with pytest.raises(ember.EmberError, match="f32, bf16 or f16"):
        ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "ddim_three"),
                                                torch_dtype="int32")


def test_sd3_pipeline_matches_diffusers():
    """StableDiffusion3Pipeline without T5 (scripts/gen_sd3_fixtures.py): a seeded run with a
    negative prompt, one from committed latents, second-encoder prompts, a batch of two prompts
    times two images; diffusers' images within 1e-3."""
    p = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "sd3_tiny"))
    assert p.class_name == "StableDiffusion3Pipeline"
    assert p.scheduler == "FlowMatchEulerDiscreteScheduler"
    meta, ref = _diffusion_bundle("sd3_tiny_ref")
    r = meta["runs"]["negative"]
    out = p(num_inference_steps=r["steps"], generator=r["seed"], prompt=r["prompt"],
            negative_prompt=r["negative_prompt"], guidance_scale=r["guidance"],
            max_sequence_length=r["max_sequence_length"]).images
    np.testing.assert_allclose(out, ref["negative_image"], atol=1e-3, err_msg="sd3 negative")
    r = meta["runs"]["cfg"]
    out = p(num_inference_steps=r["steps"], latents=ref["latents"], prompt=r["prompt"],
            max_sequence_length=r["max_sequence_length"]).images  # guidance 7.0 by default
    np.testing.assert_allclose(out, ref["latents_image"], atol=1e-3, err_msg="sd3 latents")
    out = p(num_inference_steps=3, generator=41, prompt="a photo of a cat",
            prompt_2="a red cube", negative_prompt="blurry", negative_prompt_2="",
            guidance_scale=5.0, max_sequence_length=8).images
    np.testing.assert_allclose(out, ref["prompt2_image"], atol=1e-3, err_msg="sd3 prompt_2")
    out = p(num_inference_steps=2, generator=3, prompt=["a photo of a cat", "a red cube"],
            negative_prompt=["blurry", ""], num_images_per_prompt=2, guidance_scale=5.0,
            max_sequence_length=4).images
    np.testing.assert_allclose(out, ref["batch_image"], atol=1e-3, err_msg="sd3 batch")
    with pytest.raises(ember.EmberError, match="3 seeds"):
        p(num_inference_steps=1, prompt="x", num_images_per_prompt=2, generator=[1, 2, 3])


def test_sd3_with_t5_matches_diffusers():
    """StableDiffusion3Pipeline with its T5 (scripts/gen_sd3_t5_fixtures.py): a seeded run with
    a negative prompt and one from committed latents; diffusers' images within 1e-3."""
    p = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "sd3_t5"))
    assert p.class_name == "StableDiffusion3Pipeline"
    meta, ref = _diffusion_bundle("sd3_t5_ref")
    r = meta["runs"]["negative"]
    out = p(num_inference_steps=r["steps"], generator=r["seed"], prompt=r["prompt"],
            negative_prompt=r["negative_prompt"], guidance_scale=r["guidance"],
            max_sequence_length=r["max_sequence_length"]).images
    np.testing.assert_allclose(out, ref["negative_image"], atol=1e-3, err_msg="sd3 t5 negative")
    r = meta["runs"]["cfg"]
    out = p(num_inference_steps=r["steps"], latents=ref["latents"], prompt=r["prompt"],
            max_sequence_length=r["max_sequence_length"]).images
    np.testing.assert_allclose(out, ref["latents_image"], atol=1e-3, err_msg="sd3 t5 latents")


def test_flux_pipeline_matches_diffusers():
    """FluxPipeline (scripts/gen_flux_fixtures.py): a seeded run with prompt_2 and one from the
    committed (packed) latents, guidance embedded; diffusers' images within 1e-3; a negative
    prompt refused."""
    p = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "flux_tiny"))
    assert p.class_name == "FluxPipeline"
    assert p.scheduler == "FlowMatchEulerDiscreteScheduler"
    meta, ref = _diffusion_bundle("flux_tiny_ref")
    r = meta["runs"]["prompt2"]
    out = p(num_inference_steps=r["steps"], generator=r["seed"], prompt=r["prompt"],
            prompt_2=r["prompt_2"], guidance_scale=r["guidance"], height=r["height"],
            width=r["width"], max_sequence_length=r["max_sequence_length"]).images
    np.testing.assert_allclose(out, ref["prompt2_image"], atol=1e-3, err_msg="flux prompt_2")
    r = meta["runs"]["dev"]
    out = p(num_inference_steps=r["steps"], latents=ref["latents"], prompt=r["prompt"],
            height=r["height"], width=r["width"],  # guidance 3.5 by default
            max_sequence_length=r["max_sequence_length"]).images
    np.testing.assert_allclose(out, ref["latents_image"], atol=1e-3, err_msg="flux latents")
    with pytest.raises(ember.EmberError, match="true_cfg_scale"):
        p(num_inference_steps=1, prompt="x", negative_prompt="y", height=16, width=16)


def test_diffusion_conditional_pipelines_match_diffusers():
    """StableDiffusionPipeline with a prompt (guidance from committed latents; a negative prompt
    from a seed), with the VAE tiled at 32 x 32, and DiTPipeline with a class label: diffusers'
    images within 1e-3 (scripts/gen_sd_fixtures.py, gen_vae_tiling_fixtures.py,
    gen_dit_fixtures.py)."""
    sd = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "sd_tiny"))
    assert sd.class_name == "StableDiffusionPipeline"
    meta, ref = _diffusion_bundle("sd_tiny_ref")
    for name in ("cfg", "negative"):
        r = meta["runs"][name]
        out = sd(num_inference_steps=r["steps"], generator=r["seed"],
                 latents=ref[name + "_latents"] if r["latents"] else None, prompt=r["prompt"],
                 negative_prompt=r["negative_prompt"], guidance_scale=r["guidance"]).images
        np.testing.assert_allclose(out, ref[name + "_image"], atol=1e-3, err_msg=name)
    _, tiled = _diffusion_bundle("vae_tiling_ref")
    out = sd.enable_vae_tiling()(num_inference_steps=2, generator=3, prompt="a photo of a cat",
                                 height=32, width=32).images
    np.testing.assert_allclose(out, tiled["sd_tiled_image"], atol=1e-3, err_msg="vae tiling")
    meta, ref = _diffusion_bundle("sd_img2img_ref")  # scripts/gen_sd_img2img_fixtures.py
    for name, sched in (("pndm", None), ("euler", "euler")):
        r = meta["runs"][name]
        p = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "sd_tiny"))
        if sched:
            p.set_scheduler(sched)
        init = ref[name + "_init"] if name == "pndm" else ref[name + "_init"][0]  # [1,H,W,3] | [H,W,3]
        out = p(num_inference_steps=r["steps"], generator=r["seed"], prompt=r["prompt"],
                negative_prompt=r["negative_prompt"], guidance_scale=r["guidance"], image=init,
                strength=r["strength"]).images
        np.testing.assert_allclose(out, ref[name + "_image"], atol=1e-3, err_msg="img2img " + name)
    dit = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "dit_pipe"))
    assert dit.class_name == "DiTPipeline"
    meta, ref = _diffusion_bundle("dit_runs_ref")
    for name in ("cfg", "nocfg"):
        r = meta["runs"][name]
        out = dit(num_inference_steps=r["steps"], generator=r["seed"], class_labels=[r["label"]],
                  guidance_scale=r["guidance"]).images
        np.testing.assert_allclose(out, ref[name + "_image"], atol=1e-3, err_msg="dit " + name)
    with pytest.raises(ember.EmberError, match="needs a prompt"):
        sd(num_inference_steps=1)
    with pytest.raises(ember.EmberError, match="class label"):
        sd(num_inference_steps=1, prompt="x", class_labels=3)
    with pytest.raises(ember.EmberError, match="out of range"):
        dit(num_inference_steps=1, class_labels=10 ** 6)
    with pytest.raises(TypeError, match="list of ints"):
        dit(num_inference_steps=1, class_labels=[])
    with pytest.raises(ember.EmberError, match="out of range"):
        dit(num_inference_steps=1, class_labels=[1, 10 ** 6])
    meta, ref = _diffusion_bundle("dit_batch_ref")  # scripts/gen_dit_batch_fixtures.py
    r = meta["runs"]["dit_cfg3"]  # a list of labels: one batched run, as diffusers'
    out = dit(num_inference_steps=r["steps"], generator=r["seed"], class_labels=r["labels"],
              guidance_scale=r["guidance"]).images
    np.testing.assert_allclose(out, ref["dit_cfg3_image"], atol=1e-3, err_msg="dit batch")
    ddim = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "ddim_three"))
    with pytest.raises(ember.EmberError, match="unconditional"):
        ddim(num_inference_steps=1, prompt="a cat")
    with pytest.raises(ember.EmberError, match="has no VAE"):
        ddim.enable_vae_tiling()(num_inference_steps=1)
    ddim = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "ddim_three"))
    with pytest.raises(ember.EmberError, match="init image given to DDIMPipeline"):
        ddim(num_inference_steps=1, image=np.zeros((8, 8, 3), np.float32))


def test_diffusion_inpaint_and_refiner_match_diffusers():
    """Inpainting (scripts/gen_sd_inpaint_fixtures.py: the 9-channel UNet, a PIL mask), the SDXL
    refiner's aesthetic scores (scripts/gen_sdxl_refiner_fixtures.py) and prompt embeddings given
    (scripts/gen_sd_prompt_embeds_fixtures.py): diffusers' images within 1e-3."""
    meta, ref = _diffusion_bundle("sd_inpaint_ref")
    p = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "sd_inpaint_tiny"))
    assert p.class_name == "StableDiffusionInpaintPipeline"
    r = meta["runs"]["inpaint"]
    out = p(num_inference_steps=r["steps"], generator=r["seed"], prompt=r["prompt"],
            guidance_scale=r["guidance"], image=ref["inpaint_init"],
            mask_image=ref["inpaint_mask"]).images
    np.testing.assert_allclose(out, ref["inpaint_image"], atol=1e-3, err_msg="inpaint")
    meta, ref = _diffusion_bundle("sdxl_refiner_tiny_ref")
    xl = ember.DiffusionPipeline.from_pretrained(
        os.path.join(FX, "diffusion", "sdxl_refiner_tiny"))
    r = meta["runs"]["scores"]
    out = xl(num_inference_steps=r["steps"], generator=r["seed"], prompt=r["prompt"],
             negative_prompt=r["negative_prompt"], guidance_scale=r["guidance"],
             image=ref["scores_init"], strength=r["strength"],
             aesthetic_score=r["aesthetic_score"],
             negative_aesthetic_score=r["negative_aesthetic_score"]).images
    np.testing.assert_allclose(out, ref["scores_image"], atol=1e-3, err_msg="refiner")
    h = meta["handover"]  # the base to denoising_end as latents, the refiner from them
    base = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "sdxl_tiny"))
    lat = base(num_inference_steps=h["steps"], generator=h["base_seed"], prompt=h["prompt"],
               guidance_scale=h["guidance"], denoising_end=h["split"],
               output_type="latent").images
    np.testing.assert_allclose(lat, ref["handover_latents"], atol=1e-3, err_msg="base latents")
    out = xl(num_inference_steps=h["steps"], generator=h["refiner_seed"], prompt=h["prompt"],
             guidance_scale=h["guidance"], image=lat, denoising_start=h["split"]).images
    np.testing.assert_allclose(out, ref["handover_image"], atol=1e-3, err_msg="hand-over")
    meta, ref = _diffusion_bundle("sd_prompt_embeds_ref")  # gen_sd_prompt_embeds_fixtures.py
    sd = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "sd_tiny"))
    r = meta["runs"]["embeds_neg"]
    out = sd(num_inference_steps=r["steps"], generator=r["seed"], guidance_scale=r["guidance"],
             prompt_embeds=ref["embeds_neg_embeds"],
             negative_prompt_embeds=ref["embeds_neg_neg_embeds"],
             num_images_per_prompt=r["num_images_per_prompt"]).images
    np.testing.assert_allclose(out, ref["embeds_neg_image"], atol=1e-3, err_msg="prompt_embeds")
    meta, ref = _diffusion_bundle("sdxl_prompt_embeds_ref")  # SDXL: pooled ones beside
    r = meta["runs"]["xl_negative"]
    out = base(num_inference_steps=r["steps"], generator=r["seed"], guidance_scale=r["guidance"],
               prompt_embeds=ref["xl_negative_embeds"],
               pooled_prompt_embeds=ref["xl_negative_pooled"],
               negative_prompt=r["negative_prompt"],
               num_images_per_prompt=r["num_images_per_prompt"]).images
    np.testing.assert_allclose(out, ref["xl_negative_image"], atol=1e-3, err_msg="SDXL embeds")
    meta, ref = _diffusion_bundle("generator_list_ref")  # gen_generator_list_fixtures.py
    r = meta["runs"]["sd_list"]
    sd.set_scheduler("euler-a")
    out = sd(num_inference_steps=r["steps"], generator=r["seeds"], prompt=r["prompt"],
             guidance_scale=r["guidance"], num_images_per_prompt=r["per"]).images
    np.testing.assert_allclose(out, ref["sd_list_image"], atol=1e-3, err_msg="generator list")
    meta, ref = _diffusion_bundle("sd_inpaint_ref")  # last: skipped without PIL
    PIL = pytest.importorskip("PIL.Image")
    r = meta["runs"]["png_mask"]
    mask = PIL.open(os.path.join(FX, "diffusion", "sd_inpaint_mask.png"))
    inp = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "sd_inpaint_tiny"))
    out = inp(num_inference_steps=r["steps"], generator=r["seed"], prompt=r["prompt"],
              guidance_scale=r["guidance"], image=ref["png_mask_init"], mask_image=mask).images
    np.testing.assert_allclose(out, ref["png_mask_image"], atol=1e-3, err_msg="PIL mask")


def test_diffusion_sd_batches_match_diffusers():
    """Stable Diffusion batches (scripts/gen_sd_batch_fixtures.py): num_images_per_prompt with
    one seed, a list of prompts with a list of negative prompts, the VAE sliced; diffusers'
    images within 1e-3; bad batch arguments refused."""
    meta, ref = _diffusion_bundle("sd_batch_ref")
    path = os.path.join(FX, "diffusion", "sd_tiny")
    for name, sliced in (("cfg2", False), ("nocfg2", True), ("prompts", True)):
        r = meta["runs"][name]
        sd = ember.DiffusionPipeline.from_pretrained(path)
        if sliced:
            sd.enable_vae_slicing()
        out = sd(num_inference_steps=r["steps"], generator=r["seed"], prompt=r["prompt"],
                 negative_prompt=r["negative_prompt"], guidance_scale=r["guidance"], height=8,
                 width=8, num_images_per_prompt=r["num_images_per_prompt"]).images
        assert out.shape == ref[name + "_image"].shape
        np.testing.assert_allclose(out, ref[name + "_image"], atol=1e-3, err_msg=name)
    sd = ember.DiffusionPipeline.from_pretrained(path)
    with pytest.raises(ValueError, match="num_images_per_prompt 0"):
        sd(num_inference_steps=1, prompt="x", num_images_per_prompt=0)
    with pytest.raises(ember.EmberError, match="EM_PIPELINE_MAX_BATCH"):
        sd(num_inference_steps=1, prompt="x", num_images_per_prompt=5000)
    with pytest.raises(ValueError, match="same length"):
        sd(num_inference_steps=1, prompt=["x", "y"], negative_prompt=["z"])
    with pytest.raises(ember.EmberError, match="StableDiffusionPipeline's"):
        ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "ddim_three"))(
            num_inference_steps=1, prompt=["x", "y"])


def test_diffusion_errors():
    with pytest.raises(ember.EmberError, match="model_index.json"):
        ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "sched"))
    pipe = ember.DiffusionPipeline.from_pretrained(os.path.join(FX, "diffusion", "ddim_three"))
    with pytest.raises(ember.EmberError, match="shape"):
        pipe(num_inference_steps=2, latents=np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(ember.EmberError, match="stopped"):
        pipe(num_inference_steps=3, callback=lambda i, t, s: False)
    with pytest.raises(ValueError, match="scheduler"):
        pipe.set_scheduler("lms")
