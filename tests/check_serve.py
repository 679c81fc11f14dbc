#!/usr/bin/env python3
"""`ember serve` end to end on loopback, with the Python standard library as the client.

Usage: check_serve.py EMBER
Builds a tiny Qwen3 checkpoint in a temporary folder (random weights, the byte-level BPE test
tokenizer of tests/fixtures/tokenizers with a ChatML template), starts `EMBER serve` on it on a
free port with an API key, and checks:
  - /health, /v1/models, /tokenize + /detokenize, /metrics;
  - chat and completions, non-streaming and streamed (SSE framing: "data: ...\\n\\n" events, one
    id, the role chunk first, finish_reason on the last content chunk only, the usage chunk of
    stream_options.include_usage, "data: [DONE]"); the streamed deltas concatenated equal the
    non-streamed text under greedy decoding;
  - greedy answers equal what `EMBER generate --greedy` prints for the same message / prompt
    and max_tokens;
  - 6 concurrent greedy streams (more than --max-batch 4: some wait, then join the running
    batch) give byte-identical text to the same requests run alone;
  - errors as OpenAI's JSON: bad JSON, wrong types, unknown model, a too-long prompt (400/404),
    a missing or wrong key (401), a body over the limit (413), more requests than --parallel
    (429); clients that disconnect mid-stream free their rows (the requests end as "abort");
  - SIGTERM drains: a running request finishes and the server exits 0.
Exit 77 (skipped) when this ember has no HTTP server (built without libmicrohttpd).
"""
import http.client
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

KEY = "test-key-123"
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.environ.get("EMBER_FIXTURES") or os.path.join(HERE, "fixtures")
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def fail(msg):
    sys.exit("FAIL: " + msg)


def check(cond, msg):
    if not cond:
        fail(msg)


# ---- the checkpoint ----

def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, (shape, values) in tensors.items():
        data = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_checkpoint(d):
    rng = random.Random(1234)
    tok = json.load(open(os.path.join(FIXTURES, "tokenizers", "bpe_bytelevel.json")))
    vocab = 1 + max([t["id"] for t in tok["added_tokens"]] + list(tok["model"]["vocab"].values()))
    cfg = json.load(open(os.path.join(FIXTURES, "models", "qwen3", "config.json")))
    cfg.update(vocab_size=vocab, tie_word_embeddings=True, max_position_embeddings=4096,
               eos_token_id=2, bos_token_id=1)
    hid, inter, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def mat(rows, cols, std):
        return [rows, cols], [rng.gauss(0, std) for _ in range(rows * cols)]

    def ones(n):
        return [n], [1.0] * n

    t = {"model.embed_tokens.weight": mat(vocab, hid, 1.0), "model.norm.weight": ones(hid)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.update({
            p + "input_layernorm.weight": ones(hid),
            p + "post_attention_layernorm.weight": ones(hid),
            p + "self_attn.q_proj.weight": mat(nh * hd, hid, 0.2),
            p + "self_attn.k_proj.weight": mat(nkv * hd, hid, 0.2),
            p + "self_attn.v_proj.weight": mat(nkv * hd, hid, 0.2),
            p + "self_attn.o_proj.weight": mat(hid, nh * hd, 0.2),
            p + "self_attn.q_norm.weight": ones(hd),
            p + "self_attn.k_norm.weight": ones(hd),
            p + "mlp.gate_proj.weight": mat(inter, hid, 0.2),
            p + "mlp.up_proj.weight": mat(inter, hid, 0.2),
            p + "mlp.down_proj.weight": mat(hid, inter, 0.2),
        })
    write_safetensors(os.path.join(d, "model.safetensors"), t)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    json.dump({"eos_token_id": 2, "bos_token_id": 1, "pad_token_id": 0},
              open(os.path.join(d, "generation_config.json"), "w"))
    shutil.copy(os.path.join(FIXTURES, "tokenizers", "bpe_bytelevel.json"),
                os.path.join(d, "tokenizer.json"))
    json.dump({"chat_template": CHATML, "eos_token": "<|im_end|>", "bos_token": None},
              open(os.path.join(d, "tokenizer_config.json"), "w"))


def read_safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def make_checkpoint_like(d, fam, seed=4321, mat_std=0.2):
    """A checkpoint of the architecture of tests/fixtures/models/FAM (its config and tensor
    names and shapes; f32) for the serve tests: the vocabulary grown to the byte-level test
    tokenizer's (embedding and head rows), random weights large enough for varied greedy answers
    (the fixture's own are initialiser-small), its 1-D tensors (norms, scalars, router scales)
    kept, the tokenizer and ChatML template of make_checkpoint. A nested text_config (Gemma 4's
    multimodal wrapper) gets the same vocabulary changes."""
    rng = random.Random(seed)
    src = os.path.join(FIXTURES, "models", fam)
    tok = json.load(open(os.path.join(FIXTURES, "tokenizers", "bpe_bytelevel.json")))
    vocab = 1 + max([t["id"] for t in tok["added_tokens"]] + list(tok["model"]["vocab"].values()))
    cfg = json.load(open(os.path.join(src, "config.json")))
    old_vocab = (cfg.get("text_config") or cfg)["vocab_size"]
    for c in (cfg, cfg.get("text_config")):
        if not c:
            continue
        old = c.get("vocab_size", 0)
        c.update(vocab_size=vocab, max_position_embeddings=4096, eos_token_id=2, bos_token_id=1)
        if c.get("vocab_size_per_layer_input") == old:
            c["vocab_size_per_layer_input"] = vocab
    # Gemma scales its embeddings by sqrt(hidden): at std 1 the input token's own embedding would
    # outweigh the layers (and, tied, the head would repeat the last token)
    text = cfg.get("text_config") or cfg
    embed_std = 0.1 * text["hidden_size"] ** -0.5 if "gemma" in text["model_type"] else 1.0
    path = os.path.join(src, "model.safetensors")
    header = read_safetensors_header(path)
    blob = open(path, "rb").read()
    base = 8 + struct.unpack("<Q", blob[:8])[0]
    t = {}
    for name, h in sorted(header.items()):
        check(h["dtype"] == "F32", f"{fam} fixture: {name} is {h['dtype']}, expected F32")
        shape = list(h["shape"])
        if len(shape) < 2:  # norms, scalars: the fixture's values
            a, b = h["data_offsets"]
            t[name] = (shape, list(struct.unpack(f"<{(b - a) // 4}f", blob[base + a:base + b])))
            continue
        if shape[0] == old_vocab and ("embed" in name or "lm_head" in name):
            shape[0] = vocab
        std = (embed_std if "embed" in name else mat_std)
        n = 1
        for s in shape:
            n *= s
        t[name] = (shape, [rng.gauss(0, std) for _ in range(n)])
    write_safetensors(os.path.join(d, "model.safetensors"), t)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    json.dump({"eos_token_id": 2, "bos_token_id": 1, "pad_token_id": 0},
              open(os.path.join(d, "generation_config.json"), "w"))
    shutil.copy(os.path.join(FIXTURES, "tokenizers", "bpe_bytelevel.json"),
                os.path.join(d, "tokenizer.json"))
    json.dump({"chat_template": CHATML, "eos_token": "<|im_end|>", "bos_token": None},
              open(os.path.join(d, "tokenizer_config.json"), "w"))


# ---- a small client ----

class Server:
    def __init__(self, ember, model, *extra):
        self.proc = subprocess.Popen(
            ember + ["serve", "--model", model, "--port", "0", "--api-key", KEY, "--max-batch",
                     "4", "--parallel", "8", "--max-body-bytes", "65536", "--drain", "60"]
            + list(extra), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log = []
        self.port = None
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                fail("ember serve exited early:\n" + "".join(self.log))
            self.log.append(line)
            m = re.search(r"listening on http://[^ ]*:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if "ember serve: ready" in line:
                break
        check(self.port, "no port in ember serve's output:\n" + "".join(self.log))
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def stop(self, what):
        """SIGTERM: the server drains and exits 0."""
        self.proc.send_signal(signal.SIGTERM)
        check(self.proc.wait(120) == 0, f"{what}: exit status")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def request(self, method, path, body=None, key=KEY, raw=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        return r.status, text

    def json(self, method, path, body=None, want=200, **kw):
        status, text = self.request(method, path, body, **kw)
        check(status == want, f"{method} {path}: status {status}, expected {want}: {text[:500]}")
        return json.loads(text)

    def stream(self, path, body):
        """The events of a streamed response, checking the SSE framing."""
        status, text = self.request("POST", path, body)
        check(status == 200, f"stream {path}: status {status}: {text[:300]}")
        check(text.endswith("data: [DONE]\n\n"), f"stream does not end with [DONE]: {text[-200:]!r}")
        events = text.split("\n\n")
        check(events[-1] == "", "stream: trailing bytes after the last event")
        out = []
        for ev in events[:-1]:
            check(ev.startswith("data: ") and "\n" not in ev,
                  f"stream: an event is not one 'data: ' line: {ev[:200]!r}")
            out.append(ev[6:])
        check(out[-1] == "[DONE]" and "[DONE]" not in out[:-1], "stream: [DONE] misplaced")
        return [json.loads(e) for e in out[:-1]]


def chat_body(msg, max_tokens, **kw):
    b = {"model": "tiny", "messages": [{"role": "user", "content": msg}], "max_tokens": max_tokens,
         "temperature": 0}
    b.update(kw)
    return b


def stream_text(events, chat):
    """The text of a stream, checking ids, objects and where finish_reason appears."""
    ids = {e["id"] for e in events}
    check(len(ids) == 1, f"stream: {len(ids)} ids")
    text, finishes = "", []
    content = [e for e in events if e["choices"]]
    for k, e in enumerate(content):
        check(e["object"] == ("chat.completion.chunk" if chat else "text_completion"),
              f"stream: object {e['object']}")
        ch = e["choices"][0]
        if ch["finish_reason"] is not None:
            finishes.append(k)
        if chat:
            if k == 0:
                check(ch["delta"].get("role") == "assistant", "stream: no role in the first chunk")
            text += ch["delta"].get("content") or ""
        else:
            text += ch["text"]
    check(finishes == [len(content) - 1],
          f"stream: finish_reason on chunks {finishes} of {len(content)}, expected the last only")
    return text, content[-1]["choices"][0]["finish_reason"]


def ember_generate(ember, model, flag, text, n):
    r = subprocess.run(ember + ["generate", "--model", model, flag, text, "--greedy",
                                "--max-new-tokens", str(n)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    check(r.returncode == 0, f"ember generate failed: {r.stderr}")
    check(r.stdout.endswith("\n"), "ember generate: no final newline")
    return r.stdout[:-1]


def metric(server, name):
    status, text = server.request("GET", "/metrics")
    check(status == 200, f"/metrics: {status}")
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def skip_without_http(ember):
    """Exits 77 (skipped) when this ember was built without libmicrohttpd."""
    h = subprocess.run(ember + ["serve", "--model", "/nonexistent", "--port", "0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    if "no HTTP server" in h.stderr:
        print("SKIP: this ember was built without libmicrohttpd")
        sys.exit(77)


def chat_tokens(s, msg):
    """The prompt tokens of one user message after the chat template."""
    return s.json("POST", "/tokenize", {"messages": [{"role": "user", "content": msg}]})["count"]


def answers_alone(s, msgs, budget):
    """Greedy chat answers of msgs[i] (budget[i] tokens), one request at a time."""
    return [s.json("POST", "/v1/chat/completions", chat_body(m, budget[i]))
            ["choices"][0]["message"]["content"] for i, m in enumerate(msgs)]


def concurrent_streams(s, msgs, budget, rounds=2):
    """Every message streamed `rounds` times, all at once: {(round, i): text}."""
    return concurrent_bodies(s, [chat_body(m, budget[i], stream=True)
                                 for i, m in enumerate(msgs)], rounds)


def concurrent_bodies(s, bodies, rounds=1):
    """Every streamed chat request of `bodies` sent `rounds` times, all at once:
    {(round, i): text}."""
    got, errors = {}, []

    def run(k, i):
        try:
            got[(k, i)] = stream_text(s.stream("/v1/chat/completions", bodies[i]), True)[0]
        except SystemExit as e:
            errors.append(str(e))
        except Exception as e:  # noqa: BLE001 - report any client failure
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(k, i)) for k in range(rounds)
               for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    check(not errors, f"concurrent streams: {errors}")
    return got


# ---- the checks ----

def check_basics(s):
    check(s.json("GET", "/health") == {}, "/health")
    models = s.json("GET", "/v1/models")
    check(models["data"][0]["id"] == "tiny", f"/v1/models: {models}")
    tok = s.json("POST", "/tokenize", {"prompt": "Hello world"})
    check(tok["count"] == len(tok["tokens"]) > 0, f"/tokenize: {tok}")
    detok = s.json("POST", "/detokenize", {"tokens": tok["tokens"]})
    check(detok["prompt"] == "Hello world", f"/detokenize gave {detok}")
    print("basics: health, models, tokenize/detokenize round trip")


def check_chat(s, ember, model):
    msg, n = "Tell me about the weather today.", 24
    sync = s.json("POST", "/v1/chat/completions", chat_body(msg, n))
    text = sync["choices"][0]["message"]["content"]
    check(sync["object"] == "chat.completion" and sync["id"].startswith("chatcmpl-"), "chat object")
    u = sync["usage"]
    check(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], f"usage {u}")
    ev = s.stream("/v1/chat/completions",
                  chat_body(msg, n, stream=True, stream_options={"include_usage": True}))
    st, fin = stream_text(ev, True)
    check(st == text, f"chat: streamed {st!r} != sync {text!r}")
    check(fin == sync["choices"][0]["finish_reason"], "chat: finish reasons differ")
    check(ev[-1]["choices"] == [] and ev[-1]["usage"] == u, f"usage chunk {ev[-1]} vs {u}")
    check(all(e.get("usage", None) is None for e in ev[:-1]), "usage on a content chunk")
    ref = ember_generate(ember, model, "--chat", msg, n)
    check(text == ref, f"chat: server {text!r} != ember generate --chat {ref!r}")
    if fin == "length":
        check(u["completion_tokens"] == n, f"length finish with {u['completion_tokens']} tokens")
    print(f"chat: sync == stream == ember generate ({u['completion_tokens']} tokens, {fin})")


def check_completions(s, ember, model):
    prompt, n = "The quick brown fox", 20
    body = {"model": "tiny", "prompt": prompt, "max_tokens": n, "temperature": 0}
    sync = s.json("POST", "/v1/completions", body)
    text = sync["choices"][0]["text"]
    ev = s.stream("/v1/completions", dict(body, stream=True))
    st, _ = stream_text(ev, False)
    check(st == text, f"completions: streamed {st!r} != sync {text!r}")
    ref = ember_generate(ember, model, "--prompt", prompt, n)
    check(text == ref, f"completions: server {text!r} != ember generate --prompt {ref!r}")
    # a stop string: the text ends before it
    if len(text) > 4:
        stop = text[2:4]
        r = s.json("POST", "/v1/completions", dict(body, stop=[stop]))
        t2 = r["choices"][0]["text"]
        check(r["choices"][0]["finish_reason"] == "stop" and t2 == text[: text.index(stop)],
              f"stop {stop!r}: {t2!r} from {text!r}")
        ev = s.stream("/v1/completions", dict(body, stop=stop, stream=True))
        check(stream_text(ev, False)[0] == t2, "stop: streamed text differs")
    print("completions: sync == stream == ember generate; stop strings cut the text")
    check_penalties(s, body)
    check_logprobs(s, body)
    check_n(s, body)


def check_n(s, body):
    """n choices: under greedy decoding each equals the single answer; sampled with a seed they
    are drawn independently (not all equal) and reproducible; streamed, each index's deltas
    concatenate to its text; usage counts the prompt once and every choice's tokens."""
    one = s.json("POST", "/v1/completions", dict(body, max_tokens=10))
    three = s.json("POST", "/v1/completions", dict(body, max_tokens=10, n=3))
    texts = [c["text"] for c in sorted(three["choices"], key=lambda c: c["index"])]
    check(texts == [one["choices"][0]["text"]] * 3, f"n=3 greedy: {texts}")
    u1, u3 = one["usage"], three["usage"]
    check(u3["prompt_tokens"] == u1["prompt_tokens"] and
          u3["completion_tokens"] == 3 * u1["completion_tokens"], f"n=3 usage {u3} vs {u1}")
    sampled = dict(body, max_tokens=16, n=4, temperature=1.0, seed=7)
    a = [c["text"] for c in s.json("POST", "/v1/completions", sampled)["choices"]]
    b = [c["text"] for c in s.json("POST", "/v1/completions", sampled)["choices"]]
    check(a == b and len(set(a)) > 1, f"n=4 sampled with a seed: {a} / {b}")
    msgs = {"model": "tiny", "messages": [{"role": "user", "content": "Hi."}], "max_tokens": 8,
            "temperature": 1.0, "seed": 3, "n": 2}
    sync = s.json("POST", "/v1/chat/completions", msgs)["choices"]
    parts, finishes = {0: "", 1: ""}, {}
    for ev in s.stream("/v1/chat/completions", dict(msgs, stream=True)):
        for c in ev["choices"]:
            parts[c["index"]] += c["delta"].get("content") or ""
            if c["finish_reason"]:
                finishes[c["index"]] = c["finish_reason"]
    want = {c["index"]: c["message"]["content"] for c in sync}
    check(parts == want and set(finishes) == {0, 1}, f"n=2 stream {parts} vs {want}")
    for v in (0, 129, "2"):
        st, r = s.request("POST", "/v1/completions", dict(body, n=v))
        check(st == 400 and json.loads(r)["error"]["param"] == "n", f"n={v!r}: {st} {r}")
    print("n: greedy choices equal the single answer, seeded samples reproducible and distinct, "
          "streamed per index, usage summed")


def check_logprobs(s, body):
    """logprobs in OpenAI's two shapes. Under greedy decoding the chosen token is the most
    likely one, so its log-probability equals the first alternative's; every value is <= 0, the
    alternatives are sorted and their probabilities sum to at most 1; streamed entries equal the
    non-streamed ones; the entries cover every generated token."""
    n = 12
    r = s.json("POST", "/v1/completions", dict(body, max_tokens=n, logprobs=3))
    ch = r["choices"][0]
    lp = ch["logprobs"]
    k = r["usage"]["completion_tokens"]
    check(len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) ==
          len(lp["text_offset"]) == k, f"completions logprobs cover {len(lp['tokens'])} of {k}")
    for t, v, alt in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
        check(v <= 1e-6 and 1 <= len(alt) <= 3 and abs(max(alt.values()) - v) < 1e-4 and
              sum(math.exp(x) for x in alt.values()) <= 1 + 1e-4,
              f"completions logprobs entry {t!r} {v} {alt}")
    check(lp["text_offset"][0] == 0 and lp["text_offset"] == sorted(lp["text_offset"]),
          f"text_offset {lp['text_offset']}")
    if "\ufffd" not in "".join(lp["tokens"]):
        check("".join(lp["tokens"]) == ch["text"], "the tokens do not spell the text")
    msgs = {"model": "tiny", "messages": [{"role": "user", "content": "Count to ten."}],
            "max_tokens": n, "temperature": 0, "logprobs": True, "top_logprobs": 2}
    r = s.json("POST", "/v1/chat/completions", msgs)
    content = r["choices"][0]["logprobs"]["content"]
    check(len(content) == r["usage"]["completion_tokens"], "chat logprobs cover every token")
    for e in content:
        tops = [t["logprob"] for t in e["top_logprobs"]]
        check(len(tops) == 2 and tops == sorted(tops, reverse=True) and
              abs(tops[0] - e["logprob"]) < 1e-4 and e["logprob"] <= 1e-6 and
              e["token"] == e["top_logprobs"][0]["token"] and
              bytes(e["bytes"]).decode("utf-8", "replace") == e["token"],
              f"chat logprobs entry {e}")
    streamed = []
    for ev in s.stream("/v1/chat/completions", dict(msgs, stream=True)):
        for c in ev["choices"]:
            if c.get("logprobs"):
                streamed += c["logprobs"]["content"]
    check([(e["token"], round(e["logprob"], 4)) for e in streamed] ==
          [(e["token"], round(e["logprob"], 4)) for e in content],
          "streamed chat logprobs differ from the non-streamed ones")
    plain = s.json("POST", "/v1/chat/completions", dict(msgs, logprobs=False, top_logprobs=None))
    check(plain["choices"][0]["logprobs"] is None and plain["choices"][0]["message"] ==
          r["choices"][0]["message"], "logprobs changed the answer, or came unasked")
    for path, extra, param in (("/v1/chat/completions", {"top_logprobs": 21}, "top_logprobs"),
                               ("/v1/chat/completions", {"logprobs": False}, "top_logprobs"),
                               ("/v1/completions", {"logprobs": 6}, "logprobs")):
        b = dict(msgs if "chat" in path else body, **extra)
        st, txt = s.request("POST", path, b)
        check(st == 400 and json.loads(txt)["error"]["param"] == param, f"{extra}: {st} {txt}")
    print("logprobs: completions and chat shapes, greedy token = best alternative, streamed == "
          "non-streamed, bad values refused")


def check_penalties(s, body):
    """presence/frequency penalties lower the logits of tokens already generated: under greedy
    decoding a strong frequency penalty can only reduce repeats, and the answer changes when the
    plain one repeats a token. Out-of-range values are 400s naming the parameter."""
    def ids(extra):
        b = dict(body, max_tokens=40, **extra)
        text = s.json("POST", "/v1/completions", b)["choices"][0]["text"]
        return text, s.json("POST", "/tokenize", {"prompt": text,
                                                   "add_special_tokens": False})["tokens"]
    plain, p_ids = ids({})
    pen, q_ids = ids({"frequency_penalty": 2.0, "presence_penalty": 2.0})
    repeats = lambda t: len(t) - len(set(t))  # noqa: E731
    check(repeats(q_ids) <= repeats(p_ids), f"penalties: {repeats(q_ids)} repeats with, "
          f"{repeats(p_ids)} without")
    if repeats(p_ids) > 0:
        check(pen != plain, "a repeating greedy answer did not change under penalties")
    zero, _ = ids({"frequency_penalty": 0, "presence_penalty": 0})
    check(zero == plain, "penalties of 0 changed the answer")
    for k, v in (("presence_penalty", 2.5), ("frequency_penalty", -3), ("frequency_penalty", "x")):
        st, r = s.request("POST", "/v1/completions", dict(body, **{k: v}))
        check(st == 400 and json.loads(r)["error"]["param"] == k, f"{k}={v!r}: {st} {r}")
    print(f"penalties: repeats {repeats(p_ids)} -> {repeats(q_ids)} over 40 greedy tokens; "
          "out-of-range values refused")


def check_concurrent(s, n=40):
    # prompts of different lengths: a long one joining a short batch shifts the rows right
    msgs = [f"Question number {i}: what is {i} plus {i * 3}?" + " And then?" * (5 * (i % 3))
            for i in range(6)]
    alone = [s.json("POST", "/v1/chat/completions", chat_body(m, n))["choices"][0]["message"]
             ["content"] for m in msgs]
    got = [None] * len(msgs)
    errors = []

    def run(i):
        try:
            got[i] = stream_text(s.stream("/v1/chat/completions",
                                          chat_body(msgs[i], n, stream=True)), True)[0]
        except SystemExit as e:
            errors.append(str(e))
        except Exception as e:  # noqa: BLE001 - report any client failure
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(msgs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    check(not errors, f"concurrent streams: {errors}")
    for i in range(len(msgs)):
        check(got[i] == alone[i], f"stream {i} in a batch: {got[i]!r} != alone: {alone[i]!r}")
    print(f"concurrency: {len(msgs)} greedy streams (max-batch 4) equal the same requests alone "
          f"({int(metric(s, 'ember:kv_cache_shifts_total'))} cache shifts so far)")


def check_prefix_reuse(s, ember, model):
    """Two prompts sharing a long beginning: the second reuses the first's keys and values for
    the shared tokens (vLLM's prefix-cache counters say how many) and still answers exactly as
    `ember generate` does from scratch; an identical prompt reuses all but its last token."""
    shared = "The river ran past old stone mills and quiet fields under a grey sky. " * 3
    p1, p2 = shared + "First,", shared + "Then"
    n1 = s.json("POST", "/tokenize", {"prompt": p1})["count"]
    body = {"model": "tiny", "max_tokens": 12, "temperature": 0}
    s.json("POST", "/v1/completions", dict(body, prompt=p1))
    q0, h0 = metric(s, "vllm:prefix_cache_queries_total"), metric(s, "vllm:prefix_cache_hits_total")
    r = s.json("POST", "/v1/completions", dict(body, prompt=p2))
    q, h = metric(s, "vllm:prefix_cache_queries_total") - q0, metric(
        s, "vllm:prefix_cache_hits_total") - h0
    n2 = r["usage"]["prompt_tokens"]
    check(q == n2, f"prefix cache: {q} tokens queried for a {n2}-token prompt")
    check(n1 - 4 <= h + 2 and h < n2, f"prefix cache: {h} tokens reused of {n2} ({n1} kept)")
    ref = ember_generate(ember, model, "--prompt", p2, 12)
    check(r["choices"][0]["text"] == ref,
          f"prefix reuse: {r['choices'][0]['text']!r} != ember generate {ref!r}")
    h1, h0 = h, metric(s, "vllm:prefix_cache_hits_total")
    again = s.json("POST", "/v1/completions", dict(body, prompt=p2))
    h = metric(s, "vllm:prefix_cache_hits_total") - h0
    check(h == n2 - 1 and again["choices"][0]["text"] == ref, f"the same prompt again: {h} reused")
    print(f"prefix reuse: {int(h1)} of {n2} prompt tokens reused after a prompt sharing its start, "
          f"{int(h)} after the same prompt; answers equal ember generate's")


def json_prefix_ok(text):
    """Whether text can still become one JSON object: some completion (close an open string or
    escape, finish a literal or number, give a pending key its value, close the open brackets)
    makes json.loads return a dict. The brackets still open come from a scan that skips
    strings; the rest is tried."""
    stack, in_str, esc = [], False, False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    closers = "".join(reversed(stack))
    ends = ["", '"', 'n"', '0"', '00"', '000"', '0000"'] if in_str else [""]
    tails = ["", "0", "e0", "0e0", "rue", "ue", "e", "alse", "lse", "se", "ull", "ll", "l"]
    links = ["", ":0", "0", '"k":0', '"":0']
    for a in ends:
        for b in tails:
            for c in links:
                try:
                    if isinstance(json.loads(text + a + b + c + closers), dict):
                        return True
                except ValueError:
                    pass
    return False


def check_json_mode(s):
    """response_format json_object: every answer is one JSON object that Python's json module
    parses (sampled with several seeds, greedy, chat and completions, streamed equal to sync),
    ending with finish_reason "stop" when the object closes; json_schema and unknown types are
    refused with 400 naming the parameter."""
    fmt = {"type": "json_object"}
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "Answer in JSON."}],
            "max_tokens": 200, "response_format": fmt}
    answers = []
    for seed in range(4):
        r = s.json("POST", "/v1/chat/completions", dict(chat, temperature=1.0, seed=seed))
        answers.append(r["choices"][0])
    answers.append(s.json("POST", "/v1/chat/completions", dict(chat, temperature=0))["choices"][0])
    comp = s.json("POST", "/v1/completions", {"model": "tiny", "prompt": "JSON:", "max_tokens": 200,
                                              "temperature": 0, "response_format": fmt})
    # sampled from random weights, an answer may run into max_tokens inside a long string: then
    # it must still be the beginning of a JSON object (at least one answer must close its object)
    stopped = 0
    for c in answers + comp["choices"]:
        text = c["message"]["content"] if "message" in c else c["text"]
        if c["finish_reason"] == "length":
            check(json_prefix_ok(text), f"JSON mode: {text!r} cannot become a JSON object")
            continue
        check(c["finish_reason"] == "stop", f"JSON mode: finish_reason {c['finish_reason']}")
        stopped += 1
        try:
            obj = json.loads(text)
        except ValueError as e:
            fail(f"JSON mode: json.loads refused {text!r}: {e}")
        check(isinstance(obj, dict), f"JSON mode: {text!r} is not an object")
    st, _ = stream_text(s.stream("/v1/chat/completions", dict(chat, temperature=0, stream=True)),
                        True)
    check(st == answers[-1]["message"]["content"], f"JSON mode: streamed {st!r}")
    for bad in ({"type": "json_schema", "json_schema": {}}, {"type": "xml"}, "json"):
        status, text = s.request("POST", "/v1/chat/completions", dict(chat, response_format=bad))
        check(status == 400 and json.loads(text)["error"]["param"] == "response_format",
              f"response_format {bad!r}: {status} {text}")
    check(stopped >= 1, "JSON mode: no answer closed its object within max_tokens")
    check(json_prefix_ok('{"a": [1, {"b": "x\\u00') and not json_prefix_ok('{"a": 1}}') and
          not json_prefix_ok('{"a" 1'), "json_prefix_ok itself")
    print(f"JSON mode: {stopped} of {len(answers) + 1} answers closed their object and json.loads "
          f"parses them (e.g. {answers[-1]['message']['content'][:40]!r}), the others are JSON "
          "prefixes cut by max_tokens; json_schema refused")


def check_shifts(s, paged):
    """A long prompt joins a short running one (the dense cache's rows shift right to make
    room); the short one runs on until the context's end (the dense rows shift left). Both
    answers equal their runs alone. The paged cache (paged=True) writes each row at its own
    length: the same requests, no shift at all."""
    a_msg, b_msg = "Go.", "Question: what is " + "one plus " * 10 + "one?"
    a_n, b_n = 140, 40
    pa = s.json("POST", "/tokenize", {"messages": [{"role": "user", "content": a_msg}]})["count"]
    pb = s.json("POST", "/tokenize", {"messages": [{"role": "user", "content": b_msg}]})["count"]
    check(pa + a_n <= 160 and pb + b_n <= 160 and pb > pa + 20, f"prompt sizes {pa}, {pb}")
    alone_a = s.json("POST", "/v1/chat/completions", chat_body(a_msg, a_n))
    alone_b = s.json("POST", "/v1/chat/completions", chat_body(b_msg, b_n))
    check(alone_a["choices"][0]["finish_reason"] == "length", "the long answer stopped early")
    # the right shift needs b to join while a still runs; a's 140 tokens take a few ms on a quiet
    # machine, so b may come too late: try again (each try checks the answers) until it joins
    for attempt in range(8):
        shifts0 = metric(s, "ember:kv_cache_shifts_total")
        chunks0 = metric(s, "ember:prefill_chunks_total")
        got = {}
        t = threading.Thread(target=lambda: got.update(a=s.json(
            "POST", "/v1/chat/completions", chat_body(a_msg, a_n))))
        t.start()
        deadline = time.time() + 60
        while metric(s, "vllm:num_requests_running") < 1 and time.time() < deadline:
            pass
        got["b"] = s.json("POST", "/v1/chat/completions", chat_body(b_msg, b_n))
        t.join(120)
        for k, alone in (("a", alone_a), ("b", alone_b)):
            check(got[k]["choices"][0]["message"] == alone["choices"][0]["message"],
                  f"request {k} beside the other differs from alone")
        shifts = metric(s, "ember:kv_cache_shifts_total") - shifts0
        chunks = metric(s, "ember:prefill_chunks_total") - chunks0
        # joined in time: its whole prompt went in chunks between a's steps (and, dense, a's
        # row reached the context's end); a b that came near a's end gets another try
        if chunks >= (pb - 1) // 8 and (paged or shifts >= 1):
            break
    # b joined a running row: its prompt went in 8-token chunks between a's decode steps
    check(chunks >= (pb - 1) // 8, f"{chunks} prefill chunks for a {pb}-token prompt joining")
    if paged:
        check(shifts == 0, f"{shifts} cache shifts with the paged cache")
        print("paged cache: a long prompt joining a running row and the context's end, no "
              "shift, answers equal to alone")
        return
    # whether a's tail then reaches the cache's end (the left shift) depends on how far a got
    # before b arrived, i.e. on the machine's load: only the first is required, the answers'
    # equality above is the check that matters
    check(shifts >= 1, f"{shifts} cache shifts, expected at least the right one")
    if shifts < 2:
        print("NOTE: no left shift this run (request a ended before the cache's end)")
    print(f"cache shifts: a long prompt joining and the context's end ({int(shifts)} shifts), "
          "answers equal to alone")


def check_batched_prefill(ember, model):
    """Prompts of different lengths that wait together are prefilled as one batch (vLLM-style
    counters say so), one of them reusing a kept prefix (so the batch's prompts start computing
    at different offsets), both with no other row running (one whole forward) and while another
    stream decodes (the batch fits --prefill-chunk tokens: one forward between two decode steps);
    every answer equals
    `ember generate`'s, and nothing is held afterwards. To make the prompts wait together, all
    --max-batch rows are taken first: by a request of n choices (queued at once, so they too are
    one batch, and they end at the same step, freeing their rows together)."""
    s = Server(ember, model, "--served-model-name", "tiny", "--prefill-chunk", "96")
    try:
        tok = lambda p: s.json("POST", "/tokenize", {"prompt": p})["tokens"]  # noqa: E731
        base = "The river ran past old stone mills and quiet fields under a grey sky."
        s.json("POST", "/v1/completions", {"model": "tiny", "prompt": base, "max_tokens": 1})
        # the long stream outlasts the blockers, whose answers are prefixes of its answer
        go = chat_body("Go.", 300)
        s.json("POST", "/v1/chat/completions", chat_body("Go.", 1))  # kept: the n choices reuse it
        go_ref = ember_generate(ember, model, "--chat", "Go.", 300)
        for phase, decoding in (("idle", False), ("decoding", True)):
            # distinct beginnings: only the first prompt reuses a kept prefix (base, or more)
            trio = [base + f" {phase.upper()}: then the rain came down on the town",
                    f"{phase}: why is the sky blue?",
                    f"{phase} count: one two three four five six"]
            ids = [tok(p) for p in trio]
            b = tok(base)
            reuse = min(len(b), len(ids[0]) - 1)
            while ids[0][:reuse] != b[:reuse]:
                reuse -= 1
            rem = [len(ids[0]) - reuse, len(ids[1]), len(ids[2])]
            check(reuse > 8 and 3 * max(rem) <= min(96, 2 * sum(rem)) and
                  len(set(map(len, ids))) == 3,
                  f"batched prefill: prompt sizes {list(map(len, ids))}, reuse {reuse}")
            refs = [ember_generate(ember, model, "--prompt", p, 12) for p in trio]
            for attempt in range(6):
                m0 = {k: metric(s, k) for k in ("ember:prefill_batches_total",
                                                "ember:prefill_batch_prompts_total",
                                                "ember:prefill_chunks_total",
                                                "vllm:prefix_cache_hits_total")}
                got, errors, threads = {}, [], []

                def run(key, path, body, got=got, errors=errors):
                    try:
                        got[key] = s.json("POST", path, body)
                    except SystemExit as e:
                        errors.append(f"{key}: {e}")

                def start(key, path, body, threads=threads):
                    t = threading.Thread(target=run, args=(key, path, body))
                    t.start()
                    threads.append(t)

                def wait_for(name, n):
                    # until the count is seen, or no request is left that could still reach it
                    # (the blockers can end before a poll sees them all: the attempt is then
                    # retried, rather than waiting out the deadline)
                    deadline = time.time() + 60
                    while metric(s, name) < n and time.time() < deadline and \
                            any(t.is_alive() for t in threads):
                        time.sleep(0.001)  # leave the cores to the server and the clients
                if decoding:  # a long answer decodes while the prompts are prefilled
                    start("long", "/v1/chat/completions", go)
                    wait_for("vllm:num_requests_running", 1)
                blockers = 4 - decoding
                # longer blockers on each retry: on a loaded machine the three clients can be
                # slower to queue their prompts than 40 decode steps
                block_tokens = min(200, 40 << attempt)
                start("block", "/v1/chat/completions",
                      dict(chat_body("Go.", block_tokens), n=blockers))
                wait_for("vllm:num_requests_running", 4)
                for i, p in enumerate(trio):
                    start(i, "/v1/completions", {"model": "tiny", "prompt": p, "max_tokens": 12,
                                                 "temperature": 0})
                wait_for("vllm:num_requests_waiting", 3)
                for t in threads:
                    t.join(120)
                check(not errors, f"batched prefill: {errors}")
                for i in range(3):
                    check(got[i]["choices"][0]["text"] == refs[i],
                          f"batched prefill ({phase}): {got[i]['choices'][0]['text']!r} != ember "
                          f"generate {refs[i]!r}")
                for ch in got["block"]["choices"]:
                    check(go_ref.startswith(ch["message"]["content"]) and
                          ch["finish_reason"] == "length", "batched prefill: a blocker's answer")
                if decoding:
                    check(got["long"]["choices"][0]["message"]["content"] == go_ref,
                          "batched prefill: the stream decoding beside the batch differs")
                d = {k: metric(s, k) - v for k, v in m0.items()}
                batches = d["ember:prefill_batches_total"]
                prompts = d["ember:prefill_batch_prompts_total"]
                # the long answer alone, the n choices, the three prompts: one batch each
                if batches == 2 + decoding and prompts == 7:
                    break
                print(f"NOTE: batched prefill ({phase}): {int(prompts)} prompts in {int(batches)} "
                      "batches (a blocker ended before the prompts all waited); again")
            check(batches == 2 + decoding and prompts == 7,
                  f"batched prefill ({phase}): {prompts} prompts in {batches} batches")
            check(d["vllm:prefix_cache_hits_total"] >= reuse, "batched prefill: prefix not reused")
            # beside a decoding row: the n choices' batch, then the three prompts', one chunk each
            chunks = d["ember:prefill_chunks_total"]
            check(chunks == 2 * decoding, f"batched prefill ({phase}): {chunks} chunks")
            deadline = time.time() + 30
            while time.time() < deadline and (metric(s, "vllm:num_requests_running") or
                                              metric(s, "vllm:kv_cache_usage_perc")):
                time.sleep(0.01)
            check(metric(s, "vllm:num_requests_running") == 0 and
                  metric(s, "vllm:num_requests_waiting") == 0 and
                  metric(s, "vllm:kv_cache_usage_perc") == 0,
                  "batched prefill: requests or KV positions still held afterwards")
            print(f"batched prefill ({phase}): prompts of {list(map(len, ids))} tokens, one "
                  f"reusing {reuse}, prefilled as one batch ({int(chunks)} chunks in all); "
                  "answers equal ember generate's, nothing held afterwards")
        s.stop("ember serve (batched prefill)")
    finally:
        s.kill()


def check_errors(s):
    def err(method, path, body=None, want=400, **kw):
        status, text = s.request(method, path, body, **kw)
        check(status == want, f"{path}: status {status}, expected {want}: {text[:300]}")
        e = json.loads(text)["error"]
        check(isinstance(e["message"], str) and "type" in e and "param" in e and "code" in e,
              f"error JSON {e}")
        return e

    err("POST", "/v1/chat/completions", raw=b"{not json")
    err("POST", "/v1/chat/completions", raw=b"")
    err("POST", "/v1/chat/completions", raw=b"[1, 2]")
    err("POST", "/v1/chat/completions", raw=b"\xff\xfe{\"a\": 1}")
    e = err("POST", "/v1/chat/completions", chat_body("hi", "many"))
    check(e["param"] == "max_tokens", f"param {e}")
    err("POST", "/v1/chat/completions", {"messages": "hi"})
    err("POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]})
    err("POST", "/v1/chat/completions", chat_body("hi", 4, temperature=5))
    err("POST", "/v1/chat/completions", chat_body("hi", 4, n=0))
    err("POST", "/v1/chat/completions", chat_body("hi", 4, model="gpt-9"), want=404)
    e = err("POST", "/v1/chat/completions", chat_body("word " * 3000, 10))
    check("context" in e["message"], f"too long: {e}")
    err("POST", "/v1/chat/completions", chat_body("hi", 5000))
    err("POST", "/v1/chat/completions", chat_body("hi", 4), key=None, want=401)
    err("POST", "/v1/chat/completions", chat_body("hi", 4), key="wrong", want=401)
    err("GET", "/metrics", key="wrong", want=401)
    err("POST", "/v1/completions", {"prompt": "x" * 70000}, want=413)
    err("GET", "/v1/nothing", want=404)
    check(s.json("GET", "/health", key=None) == {}, "/health needs no key")
    print("errors: 400 (JSON, types, ranges, context), 401, 404, 413 as OpenAI error objects")


def open_stream(s, body):
    """A streamed request whose first event was read; the socket stays open, unread."""
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    data = json.dumps(body).encode()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                 KEY.encode() + b"\r\nContent-Type: application/json\r\nContent-Length: " +
                 str(len(data)).encode() + b"\r\n\r\n" + data)
    head = b""
    while b"data: " not in head:
        chunk = sock.recv(4096)
        check(chunk, "open stream: the server closed the connection")
        head += chunk
    check(head.startswith(b"HTTP/1.1 200"), f"open stream: {head[:100]!r}")
    return sock


def check_disconnect_and_429(s):
    aborted0 = metric(s, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"}")
    body = chat_body("Keep talking for a long while.", 4000, stream=True)
    socks = [open_stream(s, body) for _ in range(8)]  # --parallel 8: the server is full
    e = s.request("POST", "/v1/chat/completions", chat_body("one more", 4))
    check(e[0] == 429, f"a 9th request: {e[0]}, expected 429")
    for k in socks:
        k.close()
    deadline = time.time() + 60
    while time.time() < deadline:
        if metric(s, "vllm:num_requests_running") == 0 and \
                metric(s, "vllm:num_requests_waiting") == 0:
            break
        time.sleep(0.05)
    aborted = metric(s, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"}")
    check(metric(s, "vllm:num_requests_running") == 0, "rows still running after disconnects")
    check(aborted - aborted0 == 8, f"{aborted - aborted0} requests aborted, expected 8")
    check(metric(s, "vllm:kv_cache_usage_perc") == 0, "KV cache still in use after disconnects")
    r = s.json("POST", "/v1/chat/completions", chat_body("after", 4))
    check(r["choices"][0]["finish_reason"] in ("stop", "length"), "a request after disconnects")
    print("disconnects: 8 abandoned streams end as 'abort' and free their rows; 429 when full")


def check_load(s, clients=6, each=8):
    """A load test: `clients` threads (within --parallel, so nothing is turned away) each send
    `each` requests back to back, cycling through streamed chat, plain completions, JSON mode,
    stop strings and a client that disconnects after the first event. Every request that was not
    abandoned succeeds; afterwards no request runs or waits, the KV cache holds nothing, the
    abandoned ones are counted as aborts and the server still answers."""
    aborted0 = metric(s, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"}")
    finished0 = metric(s, "vllm:request_success_total")
    errors, done, dropped = [], [0], [0]
    lock = threading.Lock()

    def one(i, k):
        kind = (i + k) % 5
        if kind == 0:
            text, why = stream_text(s.stream("/v1/chat/completions",
                                             chat_body(f"client {i} turn {k}", 12, stream=True)), True)
        elif kind == 1:
            r = s.json("POST", "/v1/completions", {"model": "tiny", "prompt": f"{i} {k} go",
                                                   "max_tokens": 10, "temperature": 0.8, "seed": k})
            why = r["choices"][0]["finish_reason"]
        elif kind == 2:
            r = s.json("POST", "/v1/chat/completions",
                       chat_body("JSON please", 40, response_format={"type": "json_object"}))
            why = r["choices"][0]["finish_reason"]
        elif kind == 3:
            r = s.json("POST", "/v1/chat/completions", chat_body("stop early", 16, stop=["e", "a"]))
            why = r["choices"][0]["finish_reason"]
        else:
            open_stream(s, chat_body("abandoned", 4000, stream=True)).close()
            with lock:
                dropped[0] += 1
            return
        check(why in ("stop", "length"), f"load: finish_reason {why!r}")
        with lock:
            done[0] += 1

    retries = [0]

    def client(i):
        for k in range(each):
            for attempt in range(50):
                try:
                    one(i, k)
                except SystemExit as e:
                    # 429 is the server's back-pressure (abandoned streams hold their place until
                    # the worker notices, within a step): a client waits and tries again
                    if "status 429" in str(e) and attempt < 49:
                        with lock:
                            retries[0] += 1
                        time.sleep(0.05)
                        continue
                    errors.append(str(e))
                except Exception as e:  # noqa: BLE001 - report any client failure
                    errors.append(repr(e))
                break

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    check(not errors, f"load: {len(errors)} failed requests: {errors[:3]}")
    deadline = time.time() + 60
    while time.time() < deadline and (metric(s, "vllm:num_requests_running") or
                                      metric(s, "vllm:num_requests_waiting")):
        time.sleep(0.05)
    check(metric(s, "vllm:num_requests_running") == 0 and
          metric(s, "vllm:num_requests_waiting") == 0, "load: requests still held after the run")
    check(metric(s, "vllm:kv_cache_usage_perc") == 0, "load: KV cache still in use after the run")
    aborted = metric(s, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"}")
    finished = metric(s, "vllm:request_success_total")
    # an abandoned request ends as 'abort', or (if it finished before the server saw the client
    # go) as a normal answer nobody reads: every request is counted once either way
    check(finished - finished0 == done[0] + dropped[0] and aborted - aborted0 <= dropped[0],
          f"load: {finished - finished0} requests counted for {done[0]} answered and "
          f"{dropped[0]} abandoned ({aborted - aborted0} aborts)")
    r = s.json("POST", "/v1/chat/completions", chat_body("after the load", 4))
    check(r["choices"][0]["finish_reason"] in ("stop", "length"), "load: a request afterwards")
    print(f"load: {clients} clients x {each} mixed requests, {done[0]} answered, {dropped[0]} "
          f"abandoned ({int(aborted - aborted0)} seen as aborts), {retries[0]} retries after 429, "
          "none failed; nothing held and no KV cache in use afterwards")


def check_metrics(s):
    status, text = s.request("GET", "/metrics")
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:inter_token_latency_seconds_count", "vllm:e2e_request_latency_seconds_sum"]:
        check(name in text, f"/metrics lacks {name}")
    check(metric(s, "vllm:generation_tokens_total") > 0, "no generated tokens counted")
    print("metrics: vLLM's names present, counters moved")


def check_sigterm(s):
    result = {}

    def run():
        result["r"] = s.json("POST", "/v1/chat/completions", chat_body("drain me", 300))

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)  # let it start (if it finished already, the drain has nothing to wait for)
    s.proc.send_signal(signal.SIGTERM)
    t.join(120)
    rc = s.proc.wait(120)
    check(rc == 0, f"ember serve exited {rc} after SIGTERM:\n" + "".join(s.log[-20:]))
    check("r" in result and result["r"]["choices"][0]["finish_reason"] in ("stop", "length"),
          f"the request in flight at SIGTERM did not finish: {result}")
    print("sigterm: the running request finished, exit 0")


def check_bench(ember, d):
    """`ember bench serve` runs its phases on the tiny checkpoint (figures not checked: no test
    asserts a rate), every request completes, and the rows have their fields. With
    $EMBER_LLAMA_SERVER naming a missing file, the llama.cpp server peer is reported unavailable
    (why, in the JSON row and the text line) and the benchmark still exits 0."""
    missing = os.path.join(d, "no-such-llama-server")
    env = dict(os.environ, EMBER_LLAMA_SERVER=missing)
    r = subprocess.run(ember + ["bench", "serve", "--model", d, "--streams", "1,3", "--rates",
                                "20", "--requests", "4", "--tokens", "4", "--json"],
                       capture_output=True, text=True, timeout=300, env=env)
    check(r.returncode == 0, f"ember bench serve: {r.returncode} {r.stderr[-500:]}")
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    phases = [(x["server"], x["phase"], x["x"], x["done"], x["failed"]) for x in rows
              if x["bench"] == "serve"]
    check(phases == [("ember", "streams", 1, 2, 0), ("ember", "streams", 3, 6, 0),
                     ("ember", "poisson", 20, 4, 0)],
          f"bench serve phases: {phases}")
    for x in rows:
        if x["bench"] == "serve":
            check(x["tokens_per_s"] > 0 and x["ttft_p50_ms"] > 0, f"bench serve row {x}")
        if x["bench"].startswith("serve_") and x["bench"] != "serve_peer":
            check(x["peer"] is None and x["peer_ms"] is None, f"a peer figure without a peer {x}")
    names = sorted({x["bench"] for x in rows})
    check(names == ["machine", "serve", "serve_itl_p50", "serve_ms_per_token", "serve_peer",
                    "serve_ttft_p50"],
          f"bench serve rows: {names}")
    peer = [x for x in rows if x["bench"] == "serve_peer"]
    check(len(peer) == 1 and peer[0]["available"] is False and missing in peer[0]["why"],
          f"bench serve peer row: {peer}")
    r = subprocess.run(ember + ["bench", "serve", "--model", d, "--streams", "1", "--rates", "0",
                                "--tokens", "2"],
                       capture_output=True, text=True, timeout=300, env=env)
    check(r.returncode == 0, f"ember bench serve (text): {r.returncode} {r.stderr[-500:]}")
    check(f"peer llama.cpp server: unavailable ($EMBER_LLAMA_SERVER={missing} is not an "
          "executable file)" in r.stdout, f"no unavailable line for the peer:\n{r.stdout}")
    print("bench serve: closed and open loop phases, no failed request; llama.cpp server peer "
          "unavailable when $EMBER_LLAMA_SERVER is missing")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ember = sys.argv[1:]
    skip_without_http(ember)
    r = subprocess.run(ember + ["serve", "--model", "/nonexistent", "--host", "0.0.0.0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    check(r.returncode != 0 and "API key" in r.stderr,
          f"a public bind without a key was not refused: {r.returncode} {r.stderr}")
    with tempfile.TemporaryDirectory() as d:
        make_checkpoint(d)
        s = Server(ember, d, "--served-model-name", "tiny")
        try:
            check_basics(s)
            check_chat(s, ember, d)
            check_completions(s, ember, d)
            check_prefix_reuse(s, ember, d)
            check_json_mode(s)
            check_concurrent(s)
            check_errors(s)
            check_disconnect_and_429(s)
            check_load(s)
            check_metrics(s)
            check_sigterm(s)
        finally:
            s.kill()
        # a small context: the rows reach its end (the dense cache's rows shift left) while
        # others still run (no prefix reuse: the joining prompt must be prefilled in chunks, not
        # copied); with the paged cache (the default) and the dense one (--kv-block 0)
        for kv_block in ("16", "0"):
            s = Server(ember, d, "--served-model-name", "tiny", "--ctx", "160", "--prefill-chunk",
                       "8", "--prefix-cache", "0", "--kv-block", kv_block)
            try:
                check_concurrent(s, n=48)
                check_shifts(s, paged=kv_block != "0")
                s.stop("ember serve --ctx 160")
            finally:
                s.kill()
        check_batched_prefill(ember, d)
        check_bench(ember, d)
    print("serve: all checks passed")


if __name__ == "__main__":
    main()
