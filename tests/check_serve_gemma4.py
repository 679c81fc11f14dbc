#!/usr/bin/env python3
"""`ember serve` end to end on Gemma 4 (loopback): greedy answers equal `ember generate`'s.

Usage: check_serve_gemma4.py EMBER
On two checkpoints of the Gemma 4 test architectures (tests/fixtures/models/gemma4_text: sliding
and full layers with their own head sizes, KV-shared last layers, per-layer inputs, a final
softcap; tests/fixtures/models/gemma4: the multimodal wrapper's text model with MoE blocks and
k = v layers), random weights and the byte-level test tokenizer (check_serve.make_checkpoint_like),
--ctx 128, --max-batch 4, prompts of 14-51 tokens (past the sliding window of 6):
  - the eager server over the paged cache (--kv-block 16) and over the dense cache (--kv-block 0):
    chat answers of each prompt alone equal `ember generate --chat --greedy`'s, and a completion
    equals `ember generate --prompt --greedy`'s;
  - 12 concurrent streams (more than --max-batch: they wait, join and leave the running batch,
    prefilled together) equal their answers alone, on both caches;
  - prompts with a shared system prompt through the prefix cache (eager, and --compile with its
    compiled prefill chunks after a reused prefix): equal to their answers without the cache;
  - --compile over the paged cache (the compiled decode steps): the same answers alone and in a
    batch, and after a warm-up reaching every (batch bucket, table bucket) pair the compile count
    stays flat (check_serve_compile.compiled_server).
Exit 77 (skipped) without the HTTP server.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_serve as cs  # noqa: E402
import check_serve_compile as csc  # noqa: E402
from check_serve import check  # noqa: E402

MSGS = csc.MSGS
FAMILIES = ("gemma4_text", "gemma4")


def eager_checks(ember, d, fam, common, flags, name, budget, gen, ref):
    """One eager server (one cache): answers alone (== `ember generate`'s gen, and == ref, the
    first cache's, when given), a completion, concurrent streams. Returns the answers alone."""
    s = cs.Server(ember, d, *common, *flags)
    try:
        got = cs.answers_alone(s, MSGS, budget)
        ref = ref or got
        for i in range(len(MSGS)):
            check(got[i] == gen[i], f"{fam} {name}: prompt {i} alone {got[i]!r} != "
                  f"ember generate {gen[i]!r}")
            check(got[i] == ref[i], f"{fam} {name}: prompt {i} alone {got[i]!r} "
                  f"!= the other cache's {ref[i]!r}")
        prompt = "Once upon a time, in a land far away, there was"
        r = s.json("POST", "/v1/completions", {"model": "tiny", "prompt": prompt,
                                               "max_tokens": 24, "temperature": 0})
        gen = cs.ember_generate(ember, d, "--prompt", prompt, 24)
        check(r["choices"][0]["text"] == gen, f"{fam} {name}: completion "
              f"{r['choices'][0]['text']!r} != ember generate --prompt {gen!r}")
        streams = cs.concurrent_streams(s, MSGS, budget)
        for (k, i), text in sorted(streams.items()):
            check(text == got[i], f"{fam} {name}: stream {i} (round {k}) in a batch: {text!r} != "
                  f"alone {got[i]!r}")
        s.stop(f"ember serve ({fam}, {name})")
    finally:
        s.kill()
    print(f"{fam}, eager server, {name} cache: {len(MSGS)} prompts alone and a completion == "
          f"ember generate; {len(streams)} concurrent streams equal them")
    return got


def prefix_checks(ember, d, fam, common):
    """A shared system prompt kept in the prefix cache (paged: shared blocks under sliding
    layers and KV-shared layers) gives the answer computed without it."""
    system = "You are a helpful assistant who answers briefly and politely."
    body = {"model": "tiny", "max_tokens": 20, "temperature": 0,
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": MSGS[1]}]}
    other = dict(body, messages=[body["messages"][0], {"role": "user", "content": MSGS[4]}])
    answers = {}
    for cache, extra in (("0", ()), ("4", ()), ("4c", ("--compile", "--bucket", "64"))):
        s = cs.Server(ember, d, *common[:-4], "--parallel", "16", "--prefix-cache", cache[0],
                      "--kv-block", "16", *extra)
        try:
            a = [s.json("POST", "/v1/chat/completions", b)["choices"][0]["message"]["content"]
                 for b in (other, body, body)]
            hits = cs.metric(s, "vllm:prefix_cache_hits_total")
            s.stop(f"ember serve ({fam}, --prefix-cache {cache})")
        finally:
            s.kill()
        check(a[1] == a[2], f"{fam} --prefix-cache {cache}: the same request twice: {a[1]!r} "
              f"!= {a[2]!r}")
        answers[cache] = (a, hits)
    for k in ("4", "4c"):
        check(answers[k][0] == answers["0"][0], f"{fam}: with the prefix cache ({k}) "
              f"{answers[k][0]!r} != without {answers['0'][0]!r}")
    check(answers["4"][1] > 0 and answers["4c"][1] == answers["4"][1] and answers["0"][1] == 0,
          f"{fam}: prefix cache hits {answers['4'][1]} (with), {answers['4c'][1]} (with, "
          f"--compile), {answers['0'][1]} (without)")
    print(f"{fam}: a shared system prompt from the prefix cache ({int(answers['4'][1])} tokens "
          "reused), eager and --compile, gives the answers computed without it")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ember = sys.argv[1:]
    cs.skip_without_http(ember)
    common = ("--served-model-name", "tiny", "--ctx", "128", "--parallel", "16",
              "--prefix-cache", "0")
    for fam in FAMILIES:
        with tempfile.TemporaryDirectory() as d:
            cs.make_checkpoint_like(d, fam)
            probe = cs.Server(ember, d, *common)
            try:
                plen = [cs.chat_tokens(probe, m) for m in MSGS]
                probe.stop("ember serve (the prompts' lengths)")
            finally:
                probe.kill()
            budget = [min(12 + 17 * i, 120 - p) for i, p in enumerate(plen)]
            check(all(b >= 8 for b in budget), f"prompts too long for --ctx 128: {plen}")
            gen = [cs.ember_generate(ember, d, "--chat", m, budget[i]) for i, m in enumerate(MSGS)]
            check(len(set(gen)) > 1, f"{fam}: the greedy answers are all the same: {gen[0]!r}")
            ref = None
            for name, flags, _ in reversed(csc.CACHES):  # paged first
                ref = eager_checks(ember, d, fam, common, flags, name, budget, gen, ref)
            prefix_checks(ember, d, fam, common)
            csc.compiled_server(ember, d, common, csc.CACHES[1], ref, plen, budget, fam)
    print("serve_gemma4: all checks passed")


if __name__ == "__main__":
    main()
