#!/usr/bin/env python3
"""`ember generate` on a test checkpoint gives transformers' greedy tokens.

Usage: check_generate.py FAMILY EMBER [ARGS...]
  FAMILY    a checkpoint under tests/fixtures/models/ whose <FAMILY>_ref bundle holds the prompt
            ("ids", row 0) and transformers' greedy continuation ("greedy"), written by
            scripts/gen_model_fixtures.py
  EMBER...  the command that runs the CLI (e.g. `qemu-x86_64 -cpu Haswell build/.../ember`)
Runs `EMBER generate --model <checkpoint> --ids <prompt> --greedy --print-ids` and exits
non-zero, saying where, when the tokens differ or the command fails (a signal included). Then,
with a byte-level tokenizer whose id for byte 0 is the model's first greedy token, checks that
the generated text, streamed and printed at the end of a batch, keeps its NUL byte, and that
`ember chat` streams it whole too.
Needs only the Python standard library; EMBER_FIXTURES names the fixtures directory.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile


def bundle_i64(ref, name):
    meta = json.load(open(ref + ".json"))
    t = meta["tensors"][name]
    assert t["dtype"] == "i64", f"{ref}: {name} is {t['dtype']}, not i64"
    with open(ref + ".bin", "rb") as f:
        f.seek(t["offset"])
        data = f.read(t["nbytes"])
    return list(struct.unpack(f"<{len(data) // 8}q", data)), t["shape"]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    family, ember = sys.argv[1], sys.argv[2:]
    fixtures = os.environ.get("EMBER_FIXTURES") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "fixtures")
    model = os.path.join(fixtures, "models", family)
    ref = os.path.join(fixtures, "models", family + "_ref")
    ids, shape = bundle_i64(ref, "ids")
    prompt = ids[: shape[-1]]
    want, _ = bundle_i64(ref, "greedy")
    cmd = ember + ["generate", "--model", model, "--ids", ",".join(map(str, prompt)),
                   "--max-new-tokens", str(len(want)), "--greedy", "--print-ids"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(r.stderr)
    if r.returncode != 0:
        sig = f" (signal {-r.returncode})" if r.returncode < 0 else ""
        sys.exit(f"FAIL: {' '.join(cmd)} exited with {r.returncode}{sig}")
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if got != want:
        sys.exit(f"FAIL: {family}: ember generate gave {got}, transformers' greedy tokens are {want}")
    print(f"{family}: {len(got)} greedy tokens equal transformers' ({' '.join(ember[:-1]) or 'native'})")
    check_nul_text(family, model, ember)


def byte_tokenizer(path, nul_id):
    """A byte-level BPE tokenizer.json (GPT-2's byte-to-character table, no merges): byte b is
    id b, except that byte 0 is id nul_id and byte nul_id is id 0."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) +
          list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    ids = {b: b for b in range(256)}
    ids[0], ids[nul_id] = nul_id, 0
    vocab = {chr(c): ids[b] for b, c in zip(bs, cs)}
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": True}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
           "normalizer": None, "pre_tokenizer": level, "post_processor": None, "decoder": level,
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": []}}
    with open(path, "w") as f:
        json.dump(tok, f)


def check_nul_text(family, model, ember):
    """The generated text goes to stdout whole, NUL bytes included: with a byte-level tokenizer
    whose id for byte 0 is the model's first greedy token after "abc", streamed (one prompt)
    and printed at the end (two prompts) the text starts with a NUL byte."""
    cfg = json.load(open(os.path.join(model, "config.json")))
    if cfg.get("vocab_size", 0) < 256:
        return
    with tempfile.TemporaryDirectory() as tmp:
        for f in os.listdir(model):
            os.symlink(os.path.join(model, f), os.path.join(tmp, f))
        tokf = os.path.join(tmp, "tokenizer.json")
        byte_tokenizer(tokf, 0)
        cmd = ember + ["generate", "--model", tmp, "--prompt", "abc", "--max-new-tokens", "3",
                       "--greedy"]
        r = subprocess.run(cmd + ["--print-ids"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = json.loads(r.stdout.strip().splitlines()[-1])[0] if r.returncode == 0 else -1
        if not 0 < first < 256 or first in b"abc":
            print(f"{family}: NUL text check skipped (first greedy id {first})")
            return
        byte_tokenizer(tokf, first)
        batch = os.path.join(tmp, "batch.txt")
        with open(batch, "w") as f:
            f.write("abc\nabc\n")
        for what, extra in (("streamed", []), ("batch", ["--batch-file", batch])):
            c = cmd if not extra else [a for a in cmd if a not in ("--prompt", "abc")] + extra
            r = subprocess.run(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            rows = r.stdout.split(b"\n")[:-1] if extra else [r.stdout]
            if r.returncode != 0 or not rows or not all(row.startswith(b"\0") for row in rows):
                sys.exit(f"FAIL: {family}: ember generate ({what}) printed {r.stdout!r} "
                         f"(exit {r.returncode}); the text starts with a NUL byte (id {first})")
        # ember chat: a template that renders the messages' contents alone, so the prompt is
        # "abc" again; the answer follows the message echoed after "> "
        with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
            json.dump({"chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"},
                      f)
        r = subprocess.run(ember + ["chat", "--model", tmp, "--max-new-tokens", "3", "--greedy"],
                           input=b"abc\n", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if r.returncode != 0 or not r.stdout.startswith(b"> abc\n\0"):
            sys.exit(f"FAIL: {family}: ember chat printed {r.stdout!r} (exit {r.returncode}, "
                     f"{r.stderr!r}); the answer starts with a NUL byte (id {first})")
        print(f"{family}: a token whose text is a NUL byte is printed whole (streamed, batch "
              f"and chat)")


if __name__ == "__main__":
    main()
