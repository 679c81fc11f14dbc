#!/usr/bin/env python3
"""`ember serve --compile` on loopback: compiled decode steps give the eager server's answers and
stop compiling once every (batch bucket, key bucket) pair was seen.

Usage: check_serve_compile.py EMBER
On the tiny Qwen3 checkpoint of check_serve.py (random weights, the test tokenizer), with
--max-batch 4 (batch buckets 1, 2, 4), --ctx 128 and --bucket 64 (key buckets 64, 128):
  - greedy answers of several prompts of different lengths, run alone, are byte-identical under
    --compile, on the eager server (the dense cache, --kv-block 0) and from
    `ember generate --chat --greedy`;
  - a warm-up trace (one long request, then n=2 and n=4 choices of one: the batch reaches
    every bucket while the key length crosses both key buckets) compiles exactly the 3 x 2
    programs (ember:compiles_total and ember:compiled_programs in /metrics);
  - then streams of different prompt and answer lengths, more than --max-batch at once (they
    join and leave the running batch), each equal to its answer alone, and the compile count
    has not moved.
  - prompts of 1 to 40 words (13 to 101 tokens) alone: equal to the eager server's answers;
    over the paged cache their prefill chunks are compiled (bucketed rows, power-of-two columns,
    tables): the prefill programs stay within their bound (3 x 8 x 2), none compiled twice, and
    all the prompts asked again compile nothing more; EMBER_LOG_COMPILES=1 logs exactly the
    compiles the metrics count. Over the dense cache prefill stays eager (no prefill program).
All of that twice: --compile over the dense cache (--kv-block 0; key buckets of the mask) and
over the paged cache (--kv-block 16; block-table buckets of 64 positions, 4 blocks).
Then the paged-cache checks again on two MoE architectures (the qwen3_moe and mixtral test
checkpoints' shapes, random weights: check_serve.make_checkpoint_like): the routing inside the
compiled programs at every batch bucket gives the eager server's and `ember generate`'s answers.
With $EMBER_PJRT_XLA_PLUGIN set, the same answers on --device xla:0 --compile, over the paged
cache (the default there too), (skipped loudly without it). No timing is asserted. Exit 77 (skipped) without the HTTP server.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_serve as cs  # noqa: E402  (the checkpoint, the client and the SSE checks)
from check_serve import check  # noqa: E402

MSGS = ["Hi.", "What is two plus two?",
        "Tell me about the weather today, please, in a few words.",
        "Question number 7: what is 7 plus 21? And then? And then? And then?",
        "Go on.", "Write a line about the sea and the sky and the wind."]


def compiles(s):
    return int(cs.metric(s, "ember:compiles_total")), int(cs.metric(s, "ember:compiled_programs"))


def prefill_compiles(s):
    return (int(cs.metric(s, "ember:prefill_compiles_total")),
            int(cs.metric(s, "ember:prefill_compiled_programs")))


# prompts of 1 to 40 words (prompt lengths ~11 to ~90 tokens), answered alone: prefill chunks of
# most column buckets, both table buckets
VARIED = [" ".join(["sea", "sky", "wind", "rain"][k % 4] for k in range(n)) for n in range(1, 41, 3)]
# the bound on prefill programs: 3 batch buckets x 8 column buckets (1, 2, ... 128) x 2 tables
PREFILL_BOUND = 3 * 8 * 2


# the MoE test checkpoints' architectures (tests/fixtures/models; check_serve.make_checkpoint_like)
MOE = ("qwen3_moe", "mixtral")

# the two caches --compile runs over: (name, its flags, the startup log's words for it)
CACHES = [("dense", ("--kv-block", "0"), "over the dense KV cache"),
          ("paged", ("--kv-block", "16"), "over the paged KV cache")]


def compiled_server(ember, d, common, cache, ref, plen, budget, model="qwen3"):
    """The --compile checks over one cache (see the top)."""
    name, flags, words = cache
    name = f"{model}, {name}"
    paged = cache[0] == "paged"
    vbudget = [6] * len(VARIED)
    eager = cs.Server(ember, d, *common, *flags)  # the varied prompts' answers, eagerly
    try:
        vref = cs.answers_alone(eager, VARIED, vbudget)
        eager.stop("eager server (the varied prompts)")
    finally:
        eager.kill()
    os.environ["EMBER_LOG_COMPILES"] = "1"  # one stderr line per compile, counted below
    try:
        s = cs.Server(ember, d, *common, *flags, "--compile", "--bucket", "64")
    finally:
        del os.environ["EMBER_LOG_COMPILES"]
    try:
        got = cs.answers_alone(s, MSGS, budget)
        log = "".join(s.log)  # (the load's lines may follow "ready": read after requests)
        check("--compile: decode steps run as compiled programs" in log and words in log,
              f"{name}: no --compile line ({words!r}) in the startup log:\n{log}")
        for i in range(len(MSGS)):
            check(got[i] == ref[i], f"{name}: prompt {i} alone: --compile {got[i]!r} != eager "
                  f"{ref[i]!r}")
        # warm-up: batch buckets 1, 2 and 4 (n=4), each across both key buckets (prompt of
        # ~20 tokens, 100 new: key lengths from ~20 to ~120)
        long_msg, long_n = MSGS[0], 120 - plen[0]
        for n in (1, 2, 4):
            r = s.json("POST", "/v1/chat/completions", cs.chat_body(long_msg, long_n, n=n))
            texts = {c["message"]["content"] for c in r["choices"]}
            check(len(r["choices"]) == n and len(texts) == 1,
                  f"n={n}: {len(r['choices'])} choices, {len(texts)} different texts")
        warm = compiles(s)
        check(warm == (6, 6), f"{name}: after the warm-up: (compiles, programs) = {warm}, expected "
              "(6, 6): 3 batch buckets x 2 key (table) buckets")
        streams = cs.concurrent_streams(s, MSGS, budget)
        for (k, i), text in sorted(streams.items()):
            check(text == ref[i], f"{name}: stream {i} (round {k}) in a batch: {text!r} != alone "
                  f"{ref[i]!r}")
        after = compiles(s)
        check(after == warm, f"{name}: compiles grew after the warm-up: {warm} -> {after}")
        # prefill chunks: compiled over the paged cache (bucketed: never one per request),
        # eager over the dense one; the answers of prompts of 1 to 40 words equal the eager
        # server's, and asked again they compile nothing more
        vgot = cs.answers_alone(s, VARIED, vbudget)
        for i, text in enumerate(vgot):
            check(text == vref[i], f"{name}: varied prompt {i}: --compile {text!r} != eager "
                  f"{vref[i]!r}")
        pf = prefill_compiles(s)
        if paged:
            check(pf[0] == pf[1] and 0 < pf[0] <= PREFILL_BOUND,
                  f"{name}: prefill (compiles, programs) {pf}: expected equal (none compiled twice "
                  f"or evicted), at most {PREFILL_BOUND} (the bucket triples)")
        else:
            check(pf == (0, 0), f"{name}: prefill programs over the dense cache: {pf}")
        again = cs.answers_alone(s, MSGS + VARIED, budget + vbudget)
        check(again == got + vgot, f"{name}: answers changed when asked again")
        check(prefill_compiles(s) == pf and compiles(s) == warm,
              f"{name}: the same prompts again compiled more: prefill {pf} -> "
              f"{prefill_compiles(s)}, decode {warm} -> {compiles(s)}")
        s.stop(f"ember serve --compile ({name})")
    finally:
        s.kill()
    logged = sum("ember compile:" in line for line in s.log)
    check(logged == warm[0] + pf[0], f"{name}: EMBER_LOG_COMPILES logged {logged} compiles, the "
          f"metrics count {warm[0]} + {pf[0]}")
    print(f"serve --compile, {name} cache: {len(MSGS)} prompts alone == eager server == ember "
          f"generate; warm-up compiled {warm[0]} programs; {len(streams)} concurrent streams (max-batch "
          "4) equal their answers alone, no further compile; "
          f"{len(MSGS) + len(VARIED)} prompt lengths: {pf[0]} prefill programs "
          f"({'compiled, bound ' + str(PREFILL_BOUND) if paged else 'eager'}), "
          f"EMBER_LOG_COMPILES lines {logged}")


def eager_answers(ember, d, common):
    """The eager server's greedy answers alone (the dense cache), checked against `ember
    generate` for three prompts: (prompt lengths, budgets, answers)."""
    eager = cs.Server(ember, d, *common, "--kv-block", "0")
    try:
        # answers of different lengths: the prompt plus its answer within the context
        plen = [cs.chat_tokens(eager, m) for m in MSGS]
        budget = [min(12 + 17 * i, 120 - p) for i, p in enumerate(plen)]
        check(all(b >= 8 for b in budget), f"prompts too long for --ctx 128: {plen}")
        ref = cs.answers_alone(eager, MSGS, budget)
        check(compiles(eager) == (0, 0), f"compiles without --compile: {compiles(eager)}")
        eager.stop("eager server")
    finally:
        eager.kill()
    for i in (0, 2, 5):
        gen = cs.ember_generate(ember, d, "--chat", MSGS[i], budget[i])
        check(gen == ref[i], f"prompt {i}: eager server {ref[i]!r} != ember generate {gen!r}")
    check(len(set(ref)) > 1, f"the greedy answers are all the same: {ref[0]!r}")
    return plen, budget, ref


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ember = sys.argv[1:]
    cs.skip_without_http(ember)
    common = ("--served-model-name", "tiny", "--ctx", "128", "--prefix-cache", "0", "--parallel", "16")
    with tempfile.TemporaryDirectory() as d:
        cs.make_checkpoint(d)
        plen, budget, ref = eager_answers(ember, d, common)
        for cache in CACHES:
            compiled_server(ember, d, common, cache, ref, plen, budget)
        plugin = os.environ.get("EMBER_PJRT_XLA_PLUGIN")
        if not plugin or not os.path.exists(plugin):
            print("SKIP (part): xla:0 --compile: $EMBER_PJRT_XLA_PLUGIN is not set or missing")
        else:
            s = cs.Server(ember, d, *common, "--compile", "--bucket", "64", "--device", "xla:0")
            try:
                got = cs.answers_alone(s, MSGS, budget)
                log = "".join(s.log)
                check("over the paged KV cache" in log, f"xla:0: not the paged cache:\n{log}")
                for i in range(len(MSGS)):
                    check(got[i] == ref[i], f"xla:0 prompt {i}: {got[i]!r} != CPU eager "
                          f"{ref[i]!r}")
                streams = cs.concurrent_streams(s, MSGS, budget, rounds=1)
                for (k, i), text in sorted(streams.items()):
                    check(text == ref[i], f"xla:0 stream {i} in a batch: {text!r} != {ref[i]!r}")
                check(compiles(s)[1] > 0, f"xla:0: no compiled program: {compiles(s)}")
                s.stop("ember serve --compile --device xla:0")
            finally:
                s.kill()
            print("serve --compile on xla:0: answers alone and in a batch equal the CPU's")
    # MoE: the routing inside the compiled programs (ragged experts, the default), over the
    # paged cache, at every batch bucket
    for fam in MOE:
        with tempfile.TemporaryDirectory() as d:
            cs.make_checkpoint_like(d, fam)
            plen, budget, ref = eager_answers(ember, d, common)
            compiled_server(ember, d, common, CACHES[1], ref, plen, budget, fam)
    print("serve_compile: all checks passed")


if __name__ == "__main__":
    main()
