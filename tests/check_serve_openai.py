#!/usr/bin/env python3
"""`ember serve` with the official `openai` Python client (the clients users have).

Usage: check_serve_openai.py VENV EMBER
Creates (once) a virtual environment at VENV with the `openai` package pinned in
tests/requirements-serve.txt, then re-runs itself in it: starts `EMBER serve` on the tiny
checkpoint of check_serve.py and checks, through the client, chat and completions, streamed and
not (the streamed deltas concatenated equal the non-streamed text under greedy decoding), the
usage chunk of stream_options.include_usage, stop strings, and that errors reach the client as
its exception classes (BadRequestError, AuthenticationError, NotFoundError) with OpenAI's
message; then /v1/embeddings of all-MiniLM-L6-v2 ($EMBER_MINILM_DIR) against the committed
sentence-transformers embeddings (cosine >= 0.9999, float and base64). Exit 77 (skipped) when the package cannot be installed (no network) or this ember has
no HTTP server.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def ensure_venv(venv):
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and subprocess.run([py, "-c", "import openai"]).returncode == 0:
        return py
    r = subprocess.run([sys.executable, "-m", "venv", venv])
    try:
        if r.returncode == 0:
            r = subprocess.run([py, "-m", "pip", "install", "-q", "--timeout", "20", "--retries",
                                "1", "-r", os.path.join(HERE, "requirements-serve.txt")],
                               timeout=400)
    except subprocess.TimeoutExpired:
        r = subprocess.CompletedProcess([], 1)
    if r.returncode != 0:
        print("SKIP: could not install the openai package into", venv)
        sys.exit(77)
    return py


def run_checks(ember):
    import openai  # noqa: E402 - only inside the venv
    sys.path.insert(0, HERE)
    import check_serve as cs

    h = subprocess.run(ember + ["serve", "--model", "/nonexistent", "--port", "0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    if "no HTTP server" in h.stderr:
        print("SKIP: this ember was built without libmicrohttpd")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        cs.make_checkpoint(d)
        s = cs.Server(ember, d, "--served-model-name", "tiny")
        try:
            base = f"http://127.0.0.1:{s.port}/v1"
            client = openai.OpenAI(base_url=base, api_key=cs.KEY, max_retries=0, timeout=120)
            models = [m.id for m in client.models.list()]
            cs.check(models == ["tiny"], f"models.list: {models}")
            msgs = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "What is the capital of France?"}]
            r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=20,
                                               temperature=0)
            text = r.choices[0].message.content
            cs.check(r.usage.completion_tokens > 0 and r.choices[0].finish_reason in
                     ("stop", "length"), f"chat: {r}")
            parts, usage, finishes = [], None, []
            for ch in client.chat.completions.create(
                    model="tiny", messages=msgs, max_tokens=20, temperature=0, stream=True,
                    stream_options={"include_usage": True}):
                if ch.usage:
                    usage = ch.usage
                for c in ch.choices:
                    parts.append(c.delta.content or "")
                    if c.finish_reason:
                        finishes.append(c.finish_reason)
            cs.check("".join(parts) == text, f"chat stream {''.join(parts)!r} != {text!r}")
            cs.check(finishes == [r.choices[0].finish_reason], f"stream finishes {finishes}")
            cs.check(usage and usage.total_tokens == r.usage.total_tokens,
                     f"stream usage {usage} vs {r.usage}")
            lr = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=8,
                                                temperature=0, logprobs=True, top_logprobs=2,
                                                frequency_penalty=0.5)
            lc = lr.choices[0].logprobs.content
            cs.check(len(lc) == lr.usage.completion_tokens and all(
                e.logprob <= 1e-6 and len(e.top_logprobs) == 2 for e in lc),
                f"logprobs through the client: {lc}")
            two = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=20,
                                                 temperature=0, n=2)
            cs.check([c.message.content for c in two.choices] == [text, text],
                     f"n=2 through the client: {two.choices}")
            c1 = client.completions.create(model="tiny", prompt="Once upon a time",
                                           max_tokens=16, temperature=0)
            ctext = c1.choices[0].text
            cparts = [c.choices[0].text for c in client.completions.create(
                model="tiny", prompt="Once upon a time", max_tokens=16, temperature=0,
                stream=True) if c.choices]
            cs.check("".join(cparts) == ctext, f"completion stream {cparts} != {ctext!r}")
            if len(ctext) > 3:
                stop = ctext[1:3]
                c2 = client.completions.create(model="tiny", prompt="Once upon a time",
                                               max_tokens=16, temperature=0, stop=[stop])
                cs.check(c2.choices[0].text == ctext[: ctext.index(stop)] and
                         c2.choices[0].finish_reason == "stop", f"stop {stop!r}: {c2}")
            for call, exc in [
                (lambda: client.chat.completions.create(model="tiny", messages=msgs,
                                                        max_tokens=5, temperature=9),
                 openai.BadRequestError),
                (lambda: client.chat.completions.create(model="nope", messages=msgs,
                                                        max_tokens=5), openai.NotFoundError),
                (lambda: openai.OpenAI(base_url=base, api_key="bad", max_retries=0)
                 .models.list(), openai.AuthenticationError),
                (lambda: client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": "w " * 5000}],
                    max_tokens=5), openai.BadRequestError),
                (lambda: client.embeddings.create(model="tiny", input="a causal LM"),
                 openai.BadRequestError),
            ]:
                try:
                    call()
                    cs.fail(f"expected {exc.__name__}")
                except exc as e:
                    cs.check(isinstance(e.message, str) and e.message, f"{exc.__name__}: {e}")
            print(f"openai {openai.__version__}: models, chat and completions (sync == stream), "
                  "usage, stop, errors as the client's exceptions")
        finally:
            if s.proc.poll() is None:
                s.proc.terminate()
                s.proc.wait(60)
    check_embeddings(ember, openai, cs)


def reference_embeddings():
    """sentence-transformers' embeddings of the first sentences (tests/fixtures/minilm)."""
    import json
    import struct
    fx = os.path.join(HERE, "fixtures", "minilm")
    meta = json.load(open(os.path.join(fx, "reference.json")))["tensors"]["embeddings"]
    raw = open(os.path.join(fx, "reference.bin"), "rb").read()
    n, h = meta["shape"]
    flat = struct.unpack(f"<{n * h}f", raw[meta["offset"]:meta["offset"] + meta["nbytes"]])
    texts = open(os.path.join(fx, "sentences.txt")).read().splitlines()[:n]
    return texts, [flat[i * h:(i + 1) * h] for i in range(n)]


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (sum(x * x for x in a) ** 0.5 * sum(y * y for y in b) ** 0.5)


def check_embeddings(ember, openai, cs):
    d = os.environ.get("EMBER_MINILM_DIR")
    if not d or not os.path.isdir(d):
        print("SKIP (loud): /v1/embeddings not checked: EMBER_MINILM_DIR is unset "
              "(scripts/fetch_minilm.sh fetches all-MiniLM-L6-v2)")
        return
    texts, want = reference_embeddings()
    s = cs.Server(ember, d, "--served-model-name", "minilm")
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key=cs.KEY,
                               max_retries=0, timeout=120)
        import base64
        import struct
        # no format: the client asks for base64 and decodes it; "base64": the strings as sent
        for fmt in (None, "float", "base64"):
            kw = {"encoding_format": fmt} if fmt else {}
            r = client.embeddings.create(model="minilm", input=texts[:8], **kw)
            got = [e.embedding for e in sorted(r.data, key=lambda e: e.index)]
            if fmt == "base64":
                got = [struct.unpack(f"<{len(base64.b64decode(g)) // 4}f", base64.b64decode(g))
                       for g in got]
            worst = min(cosine(g, w) for g, w in zip(got, want))
            cs.check(len(got) == 8 and worst >= 0.9999,
                     f"embeddings ({fmt}) against sentence-transformers: cosine >= {worst:.6f}")
            cs.check(r.usage.prompt_tokens > 8, f"embeddings usage {r.usage}")
        one = client.embeddings.create(model="minilm", input=texts[0]).data[0].embedding
        cs.check(cosine(one, want[0]) >= 0.9999, "a single string input")
        for call in (lambda: client.embeddings.create(model="minilm", input=[]),
                     lambda: client.embeddings.create(model="minilm", input=[[1, 2, 3]]),
                     lambda: client.chat.completions.create(
                         model="minilm", messages=[{"role": "user", "content": "hi"}])):
            try:
                call()
                cs.fail("expected BadRequestError")
            except openai.BadRequestError as e:
                cs.check(bool(e.message), f"BadRequestError: {e.message}")
        print("embeddings: all-MiniLM-L6-v2 through /v1/embeddings equal sentence-transformers")
    finally:
        if s.proc.poll() is None:
            s.proc.terminate()
            s.proc.wait(60)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    venv, ember = sys.argv[1], sys.argv[2:]
    if os.environ.get("EMBER_SERVE_IN_VENV") != "1":
        py = ensure_venv(venv)
        env = dict(os.environ, EMBER_SERVE_IN_VENV="1")
        sys.exit(subprocess.run([py, os.path.abspath(__file__)] + sys.argv[1:],
                                env=env).returncode)
    run_checks(ember)


if __name__ == "__main__":
    main()
