#!/usr/bin/env python3
"""`ember serve` with a KV memory budget (--kv-blocks / --kv-memory): preemption by recompute.

Usage: check_serve_budget.py EMBER
On the tiny Qwen3 checkpoint of check_serve.py (random weights, the test tokenizer), --ctx 96
and blocks of 4 positions (one sequence of ctx: 24 blocks):
  - a budget below one sequence of ctx (--kv-blocks 23, --kv-memory of 23 blocks' bytes) is
    refused at load with the numbers named; --kv-blocks with --kv-memory is refused;
  - with --kv-blocks 30 (about a third of what 4 rows of long answers need) and --max-batch 4,
    the answers of six prompts run alone are `ember generate --chat --greedy`'s; then twelve
    concurrent greedy streams (more than --max-batch, long answers) are byte-identical to them,
    vllm:num_preemptions_total grows (and six seeded sampled streams equal their runs alone: a
    preempted row keeps its random state), and afterwards nothing runs or waits,
    vllm:kv_cache_usage_perc is 0 and, without a prefix cache, ember:kv_cache_blocks_used is 0
    (no block leaked); with a prefix cache of 2 the same holds, kept prompts excepted (they are
    evicted under pressure, the answers do not change);
  - streams abandoned while the pool is under pressure (some preempted) end as "abort" and free
    everything; the server still answers correctly afterwards;
  - --kv-memory in MiB gives the block count its bytes hold.
No timing is asserted. Exit 77 (skipped) without the HTTP server.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_serve as cs  # noqa: E402  (the checkpoint, the client and the SSE checks)
from check_serve import check  # noqa: E402

MSGS = ["Hi.", "What is two plus two?",
        "Tell me about the weather today, please, in a few words.",
        "Question number 7: what is 7 plus 21? And then? And then?",
        "Go on.", "Write a line about the sea and the sky and the wind."]
CTX, BLOCK, BUDGET = 96, 4, 30
PER_SEQ = CTX // BLOCK  # blocks of one sequence of ctx positions


def settled(s):
    """Waits until nothing runs or waits; the gauges then."""
    deadline = time.time() + 60
    while time.time() < deadline:
        if cs.metric(s, "vllm:num_requests_running") == 0 and \
                cs.metric(s, "vllm:num_requests_waiting") == 0:
            break
        time.sleep(0.05)
    check(cs.metric(s, "vllm:num_requests_running") == 0, "requests still running")
    check(cs.metric(s, "vllm:num_requests_waiting") == 0, "requests still waiting")
    return cs.metric(s, "vllm:kv_cache_usage_perc"), cs.metric(s, "ember:kv_cache_blocks_used")


def refused(ember, d, *args):
    r = subprocess.run(ember + ["serve", "--model", d, "--port", "0", "--ctx", str(CTX),
                                "--kv-block", str(BLOCK)] + list(args),
                       capture_output=True, text=True, timeout=120)
    check(r.returncode != 0, f"ember serve {' '.join(args)} was not refused:\n{r.stderr}")
    return r.stderr


def run_budget(ember, d, common, n, ref, prefix_cache):
    s = cs.Server(ember, d, *common, "--prefix-cache", str(prefix_cache))
    try:
        check(cs.metric(s, "ember:kv_cache_blocks_total") == BUDGET, "ember:kv_cache_blocks_total")
        alone = cs.answers_alone(s, MSGS, n)
        log = "".join(s.log)  # (the load's lines may follow "ready": read after requests)
        check(f"paged KV cache of {BUDGET} blocks x {BLOCK} positions" in log and "a budget" in log,
              f"no budget in the startup log:\n{log}")
        for i in range(len(MSGS)):
            check(alone[i] == ref[i], f"prompt {i} alone under the budget: {alone[i]!r} != ember "
                  f"generate {ref[i]!r}")
        check(cs.metric(s, "vllm:num_preemptions_total") == 0, "preemptions with one request")
        streams = cs.concurrent_streams(s, MSGS, n)
        for (k, i), text in sorted(streams.items()):
            check(text == ref[i], f"stream {i} (round {k}) under the budget: {text!r} != alone "
                  f"{ref[i]!r}")
        pre = cs.metric(s, "vllm:num_preemptions_total")
        check(pre > 0, "no preemption: the budget did not bind (make the answers longer)")
        # sampled, seeded: a preempted row keeps its random state, so the text is the same too
        bodies = [cs.chat_body(m, n[i], temperature=1.0, top_k=20, seed=100 + i, stream=True)
                  for i, m in enumerate(MSGS)]
        sampled = [cs.stream_text(s.stream("/v1/chat/completions", b), True)[0] for b in bodies]
        got = {i: t for (_, i), t in cs.concurrent_bodies(s, bodies).items()}
        for i in range(len(MSGS)):
            check(got.get(i) == sampled[i], f"seeded stream {i} under the budget: {got.get(i)!r} "
                  f"!= alone {sampled[i]!r}")
        check(cs.metric(s, "vllm:num_preemptions_total") > pre, "no preemption among the seeded "
              "streams")
        pre = cs.metric(s, "vllm:num_preemptions_total")
        usage, blocks = settled(s)
        check(usage == 0, f"vllm:kv_cache_usage_perc {usage} after the run")
        if prefix_cache == 0:
            check(blocks == 0, f"{blocks} KV blocks still held after the run (leaked)")
        else:
            check(blocks <= prefix_cache * PER_SEQ, f"{blocks} KV blocks held after the run, more "
                  f"than {prefix_cache} kept prompts can")
        log = "".join(s.log)
        check("preempted" in log, "no preemption in the log")
        # abandoned streams while the pool is full: some of them preempted, waiting
        aborted0 = cs.metric(s, 'vllm:request_success_total{model_name="tiny",'
                                'finished_reason="abort"}')
        socks = [cs.open_stream(s, cs.chat_body(MSGS[i % len(MSGS)], n[i % len(MSGS)],
                                                stream=True)) for i in range(8)]
        deadline = time.time() + 60
        while cs.metric(s, "vllm:num_preemptions_total") == pre and time.time() < deadline:
            time.sleep(0.01)
        for k in socks:
            k.close()
        usage, blocks = settled(s)
        aborted = cs.metric(s, 'vllm:request_success_total{model_name="tiny",'
                               'finished_reason="abort"}') - aborted0
        check(usage == 0 and (prefix_cache or blocks == 0),
              f"after abandoned streams: usage {usage}, {blocks} blocks held")
        check(aborted > 0, "no abandoned stream ended as abort")
        again = cs.stream_text(s.stream("/v1/chat/completions",
                                        cs.chat_body(MSGS[3], n[3], stream=True)), True)[0]
        check(again == ref[3], f"after abandoned streams: {again!r} != {ref[3]!r}")
        total = cs.metric(s, "vllm:num_preemptions_total")
        s.stop("ember serve --kv-blocks")
    finally:
        s.kill()
    print(f"--kv-blocks {BUDGET} --prefix-cache {prefix_cache}: {len(streams)} concurrent streams "
          f"equal their answers alone, {int(pre)} preemptions; nothing held afterwards "
          f"({int(blocks)} blocks of kept prompts); {int(aborted)} abandoned streams ({int(total)} "
          "preemptions in all) freed")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ember = sys.argv[1:]
    cs.skip_without_http(ember)
    with tempfile.TemporaryDirectory() as d:
        cs.make_checkpoint(d)
        # refusals
        err = refused(ember, d, "--kv-blocks", str(PER_SEQ - 1))
        check(f"--kv-blocks {PER_SEQ - 1}" in err and f"--ctx {CTX}" in err and
              f"{PER_SEQ} blocks of {BLOCK} positions" in err,
              f"the refusal of a too-small --kv-blocks does not name the numbers:\n{err}")
        err = refused(ember, d, "--kv-blocks", "30", "--kv-memory", "1MiB")
        check("not both" in err, f"--kv-blocks with --kv-memory:\n{err}")
        common = ("--served-model-name", "tiny", "--ctx", str(CTX), "--kv-block", str(BLOCK),
                  "--parallel", "16", "--max-batch", "4")
        s = cs.Server(ember, d, *common, "--prefix-cache", "0")
        try:  # the sizes, and the answers' lengths, from a server without a budget
            plen = [cs.chat_tokens(s, m) for m in MSGS]
            n = [CTX - 4 - p for p in plen]
            check(all(k >= 40 for k in n), f"prompts too long for --ctx {CTX}: {plen}")
            s.stop("ember serve without a budget")
        finally:
            s.kill()
        ref = [cs.ember_generate(ember, d, "--chat", m, n[i]) for i, m in enumerate(MSGS)]
        # one block's bytes: 2 layers x keys and values x kv heads x head dim x 4 (f32) x BLOCK
        cfg = json.load(open(os.path.join(d, "config.json")))
        block_bytes = (cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] *
                       cfg["head_dim"] * 4 * BLOCK)
        err = refused(ember, d, "--kv-memory", str((PER_SEQ - 1) * block_bytes))
        check(f"{PER_SEQ - 1} blocks" in err and f"{PER_SEQ} blocks of {BLOCK} positions" in err,
              f"the refusal of a too-small --kv-memory does not name the numbers:\n{err}")
        print(f"refused: --kv-blocks {PER_SEQ - 1} and --kv-memory of {PER_SEQ - 1} blocks (one "
              f"sequence of --ctx {CTX} needs {PER_SEQ}), and both options at once")
        kib = BUDGET * block_bytes / 1024
        s = cs.Server(ember, d, *common, "--kv-memory", f"{kib:g}KiB")
        try:
            check(cs.metric(s, "ember:kv_cache_blocks_total") == BUDGET,
                  f"--kv-memory {kib:g}KiB: {cs.metric(s, 'ember:kv_cache_blocks_total')} blocks, "
                  f"expected {BUDGET} of {block_bytes} bytes")
            s.stop("ember serve --kv-memory")
        finally:
            s.kill()
        print(f"--kv-memory {kib:g}KiB holds {BUDGET} blocks of {block_bytes} bytes")
        common += ("--kv-blocks", str(BUDGET))
        run_budget(ember, d, common, n, ref, 0)
        run_budget(ember, d, common, n, ref, 2)
    print("serve_budget: all checks passed")


if __name__ == "__main__":
    main()
