#!/usr/bin/env python3
"""Checks a Hub cache written by Ember with the real huggingface_hub library (run by test_hub).

  hub_check.py cache --cache DIR --endpoint URL --log LOG --list FILE
      FILE has one line per file Ember fetched, "repo<TAB>revision<TAB>filename<TAB>path", or
      path "-" for a file Ember recorded as absent. For each, the library must find the same path
      in place (hf_hub_download with local_files_only, try_to_load_from_cache, and online
      hf_hub_download against the test Hub without a new GET: nothing re-downloaded), or the
      absence marker; scan_cache_dir must report no corruption; snapshot_download with
      local_files_only must give the same snapshot directory.
  hub_check.py constants ENV_JSON
      ENV_JSON is a list of environment dicts; for each, prints constants.HF_HUB_CACHE and
      HF_HUB_OFFLINE as the library computes them, one "cache<TAB>offline" line per dict.

Exit status 0 when every check passed; 1 with one line per failure otherwise.
"""
import importlib
import json
import os
import sys


def cmd_constants(env_json):
    keys = ["HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME",
            "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"]
    from huggingface_hub import constants
    for env in json.loads(env_json):
        for k in keys:
            os.environ.pop(k, None)
        os.environ.update(env)
        importlib.reload(constants)
        print("%s\t%d" % (constants.HF_HUB_CACHE, int(constants.HF_HUB_OFFLINE)))
    return 0


def count_gets(log):
    with open(log) as f:
        return sum(1 for line in f if json.loads(line)["method"] == "GET")


def cmd_cache(args):
    opts = dict(zip(args[::2], args[1::2]))
    cache, endpoint, log, listing = opts["--cache"], opts["--endpoint"], opts["--log"], opts["--list"]
    os.environ["HF_HUB_CACHE"] = cache
    os.environ["HF_ENDPOINT"] = endpoint
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    os.environ["HF_HUB_DISABLE_XET"] = "1"
    os.environ.pop("HF_HUB_OFFLINE", None)
    os.environ.pop("HF_TOKEN", None)
    from huggingface_hub import (hf_hub_download, scan_cache_dir, snapshot_download,
                                 try_to_load_from_cache)
    from huggingface_hub.file_download import _CACHED_NO_EXIST

    failures, checks = [], 0

    def check(ok, what):
        nonlocal checks
        checks += 1
        if not ok:
            failures.append(what)

    rows = [line.rstrip("\n").split("\t") for line in open(listing) if line.strip()]
    for repo, rev, fn, path in rows:
        cached = try_to_load_from_cache(repo, fn, cache_dir=cache, revision=rev)
        if path == "-":
            check(cached is _CACHED_NO_EXIST,
                  "try_to_load_from_cache(%s@%s, %s) = %r, not the .no_exist marker"
                  % (repo, rev, fn, cached))
            continue
        check(cached == path, "try_to_load_from_cache(%s@%s, %s) = %r, Ember wrote %r"
              % (repo, rev, fn, cached, path))
        try:
            got = hf_hub_download(repo, fn, revision=rev, local_files_only=True)
        except Exception as e:  # noqa: BLE001 - report every failure
            got = "%s: %s" % (type(e).__name__, e)
        check(got == path, "hf_hub_download(%s@%s, %s, local_files_only) = %r, Ember wrote %r"
              % (repo, rev, fn, got, path))
        before = count_gets(log)
        try:
            got = hf_hub_download(repo, fn, revision=rev)
        except Exception as e:  # noqa: BLE001
            got = "%s: %s" % (type(e).__name__, e)
        check(got == path, "hf_hub_download(%s@%s, %s) online = %r, Ember wrote %r"
              % (repo, rev, fn, got, path))
        check(count_gets(log) == before, "hf_hub_download(%s@%s, %s) downloaded the file again"
              % (repo, rev, fn))

    info = scan_cache_dir(cache)
    check(not info.warnings, "scan_cache_dir warnings: %s" % [str(w) for w in info.warnings])
    scanned = {}
    for repo in info.repos:
        for revision in repo.revisions:
            for f in revision.files:
                scanned[(repo.repo_id, revision.commit_hash, f.file_name)] = f
                check(f.size_on_disk == os.path.getsize(f.blob_path),
                      "scan_cache_dir: size of %s" % f.file_path)
    for repo, rev, fn, path in rows:
        if path == "-":
            continue
        commit = path.split("/snapshots/")[1].split("/")[0]
        name = os.path.basename(fn)
        check((repo, commit, name) in scanned,
              "scan_cache_dir does not list %s of %s at %s" % (fn, repo, commit))
        snap = snapshot_download(repo, revision=rev, local_files_only=True)
        check(path.startswith(snap + "/"),
              "snapshot_download(%s@%s, local_files_only) = %r, not the folder of %r"
              % (repo, rev, snap, path))

    for f in failures:
        print("FAIL: " + f)
    print("huggingface_hub checked Ember's cache: %d checks, %d failures" % (checks, len(failures)))
    return 1 if failures else 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "constants":
        return cmd_constants(sys.argv[2])
    if len(sys.argv) >= 2 and sys.argv[1] == "cache":
        return cmd_cache(sys.argv[2:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
