"""Peer for `ember bench train`: torch eager (and torch.compile when asked) training the same
checkpoint with the same step: causal-LM loss, backward, clip_grad_norm_(1.0), AdamW, f32.

stdin: {"model": DIR, "threads": N, "seq_len": T, "batch": B, "steps": N, "compile": bool,
"gradient_checkpointing": bool (model.gradient_checkpointing_enable())}
stdout: {"name": "torch_step", "ms": median step} (and "torch_compile_step"), and
{"name": "torch_kb_per_token", "ms": KB} (the value in the "ms" field: the resident peak during
the timed steps above the resident set right after the weights were loaded, per token, as Ember
measures it). Exits 3 when torch or transformers cannot be imported.
"""
import json
import sys
import time

try:
    import torch
    from transformers import AutoModelForCausalLM
except Exception as e:  # noqa: BLE001
    print(json.dumps({"unavailable": f"torch/transformers: {e}"}))
    sys.exit(3)


def rss_mb():
    now = peak = -1.0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return now, peak


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def run(model, t, steps, batch, name, loaded):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(0)

    def step():
        ids = torch.randint(0, vocab, (batch, t), generator=g)
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return (time.perf_counter() - t0) * 1e3

    step()  # untimed: allocations, and compilation for torch.compile
    reset_peak()
    ms = sorted(step() for _ in range(steps))
    _, peak = rss_mb()
    print(json.dumps({"name": name, "ms": ms[len(ms) // 2]}), flush=True)
    return (peak - loaded) * 1024 / (batch * t) if loaded > 0 and peak > 0 else -1


def main():
    task = json.load(sys.stdin)
    torch.set_num_threads(int(task.get("threads", 1)))
    t, batch, steps = task["seq_len"], task["batch"], task["steps"]
    model = AutoModelForCausalLM.from_pretrained(task["model"], dtype=torch.float32).train()
    if task.get("gradient_checkpointing"):
        model.gradient_checkpointing_enable()
    loaded, _ = rss_mb()
    kb = run(model, t, steps, batch, "torch_step", loaded)
    print(json.dumps({"name": "torch_kb_per_token", "ms": kb}), flush=True)
    if task.get("compile"):
        try:
            run(torch.compile(model), t, steps, batch, "torch_compile_step", loaded)
        except Exception as e:  # noqa: BLE001 - torch.compile is optional where it works
            print(f"torch.compile failed: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
