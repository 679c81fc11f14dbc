#!/usr/bin/env python3
"""`ember report` on the tiny test models (--quick): results.json rows follow the schema, the
Markdown links and the HTML inlines every plot, every SVG parses as XML, and bad price files
or options are clear errors (exit status 2, the problem named). Standard library only.
usage: check_report.py EMBER_CMD... -- SOURCE_DIR OUT_DIR"""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

sep = sys.argv.index("--")
ember, (src, out) = sys.argv[1:sep], sys.argv[sep + 1:]
fx = os.path.join(src, "tests", "fixtures")
failed = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what)
    if not cond:
        failed.append(what)


def run(*args):
    return subprocess.run(ember + list(args), capture_output=True, text=True, timeout=600)


os.makedirs(out, exist_ok=True)
prices = os.path.join(out, "prices.json")
with open(prices, "w") as f:
    json.dump({"cpu": {"price_per_hour": 0.10, "watts": 60}, "tpu-v6e": {"price_per_hour": 2.7}}, f)

# bad input first (cheap)
bad = os.path.join(out, "bad_prices.json")
for text, needle in (('{"cpu": {"price_per_hour": "x"}}', "price_per_hour must be a number"),
                     ('{"cpu": {"price_per_hour": 1, "wats": 3}}', 'unknown field "wats"'),
                     ('{"cpu": 1}', '"cpu" is not an object'),
                     ('{"cpu": {"price_per_hour": 1,}', "bad_prices.json:1:"),
                     ('[]', "want an object")):
    with open(bad, "w") as f:
        f.write(text)
    r = run("report", "--out", os.path.join(out, "never"), "--prices", bad)
    check(r.returncode == 2 and needle in r.stderr, f"price file {text!r} -> {r.stderr.strip()}")
r = run("report", "--quick")
check(r.returncode == 2 and "--out DIR is required" in r.stderr, "--out is required")
r = run("report", "--out", out, "--benches", "ops,nope")
check(r.returncode == 2 and "unknown benchmark 'nope'" in r.stderr, "unknown benchmark named")

rep = os.path.join(out, "rep")
r = run("report", "--quick", "--skip-peers", "--devices", "cpu", "--models",
        os.path.join(fx, "models", "qwen3") + "," + os.path.join(fx, "models", "qwen3_moe"),
        "--benches", "decode,tokenize", "--tokenizer",
        os.path.join(fx, "tokenizers", "bpe_llama3_style.json"), "--text",
        os.path.join(src, "README.md"), "--prices", prices, "--out", rep)
print(r.stderr)
check(r.returncode == 0, "ember report --quick ran")
res = json.load(open(os.path.join(rep, "results.json")))
for k in ("ember_version", "commit", "date", "command", "machine", "devices", "limits", "rows",
          "runs", "costs", "projections"):
    check(k in res, f"results.json has {k}")
check(res["devices"] == ["cpu"], "devices as given")
check(all(run_["exit"] == 0 for run_ in res["runs"]) and len(res["runs"]) == 3,
      "three benchmarks ran and succeeded")
decode = [x for x in res["rows"] if x.get("bench") == "decode"]
check(len(decode) == 4, "decode rows: 2 models x batches 1, 16")
for x in decode:
    ok = (x["device"] == "cpu" and x["suite"] == "decode" and x["batch"] in (1, 16)
          and x["ms"] > 0 and x["tokens_per_s"] > 0 and 0 < x["fraction_of_limit"]
          and x["flops"] > 0 and x["bytes"] > 0 and x["weight_bytes"] > 0)
    check(ok, f"decode row schema: {x}")
check(any(x.get("bench") == "prefill" for x in res["rows"]), "prefill rows")
check(any(x.get("suite") == "tokenize" and x["device"] == "host" for x in res["rows"]),
      "tokenize rows on the host")
gen = [c for c in res["costs"] if c["workload"] == "generated" and not c["projected"]]
check(len(gen) == 4 and all(abs(c["price_per_1m_tokens"] - 0.10 / 3600 / c["tokens_per_s"] * 1e6)
                            < 1e-9 * c["price_per_1m_tokens"] + 1e-12 for c in gen),
      "$ per 1M generated tokens = price per hour / 3600 / tokens/s * 1e6")
check(all(abs(c["tokens_per_joule"] - c["tokens_per_s"] / 60) < 1e-6 * c["tokens_per_joule"]
          for c in gen), "tokens per joule = tokens/s / watts")
check(any(c["projected"] and c["device"] == "tpu-v6e" for c in res["costs"]),
      "projected cost on the priced spec")
for p in res["projections"]:
    step = max(p["step_bytes"] / 1640e9, p["step_flops"] / 918e12) if p["spec"] == "tpu-v6e" else None
    if step:
        check(abs(p["tokens_per_s"] - p["batch"] / step) < 1e-6 * p["tokens_per_s"],
              f"v6e projection of {p['model']} b{p['batch']}")
for key in {(c["model"], c["workload"], c["batch"]) for c in res["costs"]}:
    group = [c for c in res["costs"] if (c["model"], c["workload"], c["batch"]) == key]
    best = min(group, key=lambda c: c["price_per_1m_tokens"])
    check(sum(c["cheapest"] for c in group) == 1 and best["cheapest"], f"one cheapest for {key}")

md = open(os.path.join(rep, "report.md")).read()
html = open(os.path.join(rep, "report.html")).read()
svgs = sorted(f for f in os.listdir(rep) if f.endswith(".svg"))
check(set(svgs) >= {"roofline-cpu.svg", "tokens-vs-batch.svg", "fraction-of-bound.svg",
                    "ember-vs-peers.svg"}, f"the plots: {svgs}")
for s in svgs:
    root = ET.parse(os.path.join(rep, s)).getroot()
    check(root.tag.endswith("svg"), f"{s} parses as SVG")
    check(f"]({s})" in md, f"report.md links {s}")
    title = root.find("{http://www.w3.org/2000/svg}title").text
    check(title is not None and title.replace("&", "&amp;") in html, f"report.html inlines {s}")
check(html.count("<svg ") == len(svgs) and "<script" not in html and "http://" not in
      html.replace('xmlns="http://www.w3.org/2000/svg"', ""), "HTML self-contained")
check("projections" in md.lower() and "Cost per million tokens" in md, "cost and projection sections")
check("| case | Ember | tokenizers |" in md, "tokenizer table")

# --from: the earlier run rendered again, twice combined (rows doubled), without benchmarks
again = os.path.join(out, "again")
src_json = os.path.join(rep, "results.json")
r = run("report", "--out", again, "--from", src_json + "," + src_json)
check(r.returncode == 0, f"--from re-renders ({r.stderr.strip()[-200:]})")
res2 = json.load(open(os.path.join(again, "results.json")))
check(len(res2["rows"]) == 2 * len(res["rows"]) and len(res2["runs"]) == 2 * len(res["runs"]),
      "--from combines rows and runs")
check(os.path.exists(os.path.join(again, "report.html")), "--from writes the report")
r = run("report", "--out", again, "--from", prices)
check(r.returncode == 1 and "no \"rows\" array" in r.stderr, "--from a file that is no results.json")

# --headline: project_tpu_headline.py --json's rows (these are made up here: the check is the
# rendering and the refusals, not the numbers) become their own section, said to be projected
head = os.path.join(out, "headline.json")
rows = [{"model": "qwen3-30b-a3b", "topology": "v6e:2x4", "degree": 8, "batch": 64,
         "ragged_ms": 5.82, "loop_ms": 360.4, "ratio": 61.9, "ragged_tps": 10994,
         "loop_tps": 178, "launch_us": 6, "sync_us": 110, "latency_us": 10, "announced": 21.5},
        {"model": "gemma4-26b-a4b", "topology": "v6e:2x4", "degree": 8, "batch": 1,
         "ragged_ms": 1.53, "loop_ms": 19.2, "ratio": 12.6, "ragged_tps": 655, "loop_tps": 52,
         "launch_us": 6, "sync_us": 110, "latency_us": 10}]
with open(head, "w") as f:
    json.dump(rows, f)
r = run("report", "--out", again, "--from", src_json, "--headline", head)
check(r.returncode == 0, f"--headline renders ({r.stderr.strip()[-200:]})")
md = open(os.path.join(again, "report.md")).read()
check("projected (XLA's cost model, not measured)" in md and
      "| qwen3-30b-a3b | 64 | 5.82 | 360.4 | 61.9x | 21.5x | 10994 | 178 |" in md and
      "| gemma4-26b-a4b | 1 | 1.53 | 19.2 | 12.6x | - | 655 | 52 |" in md, "the headline section")
check(len(json.load(open(os.path.join(again, "results.json")))["headline"]) == 2,
      "results.json keeps the headline rows")
bad_head = os.path.join(out, "bad_headline.json")
for text, want in (('{"model": 1}', "not a JSON array"), ('[{"model": "m", "batch": 1}]',
                   "row 0 has no number ragged_ms"), ('[3]', "row 0 is not an object")):
    with open(bad_head, "w") as f:
        f.write(text)
    r = run("report", "--out", again, "--from", src_json, "--headline", bad_head)
    check(r.returncode != 0 and want in r.stderr, f"--headline {text}: {r.stderr.strip()[-120:]}")
sys.exit(1 if failed else 0)
