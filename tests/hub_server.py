#!/usr/bin/env python3
"""A small stand-in for the Hugging Face Hub, for Ember's Hub tests (standard library only).

It serves the Hub's file URLs, {endpoint}/{repo_id}/resolve/{revision}/{path}, for a few fixed test
repositories, with the headers the real Hub sends and huggingface_hub reads:

  * every answer about a repo carries X-Repo-Commit (the commit the revision resolved to);
  * a regular (git) file answers 200 with ETag "<git blob sha1>" and Content-Length;
  * an LFS file answers 302 to a separate "CDN" origin (another port, so another origin, like
    cdn-lfs.hf.co), with ETag and X-Linked-Etag "<sha256>" and X-Linked-Size;
  * errors carry X-Error-Code / X-Error-Message as the Hub does: 404 EntryNotFound (with the commit),
    404 RevisionNotFound, 401 RepoNotFound for an unknown repo, 401 / 403 GatedRepo for a gated repo
    asked without a token / with a wrong one.

Faults on purpose (ember-test/faulty): flaky.safetensors drops the connection half way through any
download that starts at byte 0 (a Range request completes it); corrupt.safetensors serves bytes that
do not match its sha256; norange.safetensors ignores Range requests. ember-test/evil answers with an
ETag / commit that would escape the cache. ember-test/old-name redirects (307, relative Location) to
ember-test/tiny, as the Hub does for a renamed repo.

Usage: hub_server.py --port-file FILE [--log FILE]. Binds two free ports on 127.0.0.1 (Hub, CDN),
writes "HUB_PORT CDN_PORT" to FILE once listening, logs one JSON line per request to --log, and runs
until SIGTERM or SIGINT. The content is deterministic, so the committed cache fixture made from it by
scripts/fixtures/hub_cache.py stays valid.
"""
import argparse
import hashlib
import json
import os
import signal
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

GATED_TOKEN = "hf_ember_test_token"


def safetensors_bytes(name, values):
    """A valid safetensors file holding one f32 tensor."""
    data = struct.pack("<%df" % len(values), *values)
    header = {name: {"dtype": "F32", "shape": [len(values)], "data_offsets": [0, len(data)]}}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def fake_commit(label):
    return hashlib.sha1(("ember-test commit " + label).encode()).hexdigest()


def is_lfs(path):
    return path.endswith(".safetensors") or path.endswith(".bin")


def build_repos():
    tok = json.dumps({"version": "1.0", "model": {"type": "WordLevel",
                      "vocab": {"a": 0, "b": 1}, "unk_token": "a"}}).encode()
    c1, c2 = fake_commit("tiny-1"), fake_commit("tiny-2")
    tiny = {
        "commits": {
            c1: {
                "config.json": b'{"model_type": "tiny", "hidden_size": 4}\n',
                "generation_config.json": b'{"eos_token_id": 1}\n',
                "tokenizer.json": tok,
                "model.safetensors": safetensors_bytes("w", [1.0, 2.0, 3.0, 4.0]),
            },
            c2: {
                "config.json": b'{"model_type": "tiny", "hidden_size": 8}\n',
                "tokenizer.json": tok,
                "model.safetensors": safetensors_bytes("w", [float(i) for i in range(8)]),
                "sub/dir/extra.txt": b"nested file\n",
            },
        },
        "refs": {"main": c2, "release/v2": c2, "dev": c1, "v1.0": c1},
    }
    index = {"metadata": {"total_size": 32},
             "weight_map": {"a": "model-00001-of-00002.safetensors",
                            "b": "model-00002-of-00002.safetensors"}}
    c3 = fake_commit("sharded-1")
    sharded = {
        "commits": {c3: {
            "config.json": b'{"model_type": "tiny", "hidden_size": 2}\n',
            "model.safetensors.index.json": json.dumps(index, indent=2).encode(),
            "model-00001-of-00002.safetensors": safetensors_bytes("a", [1.0, 2.0]),
            "model-00002-of-00002.safetensors": safetensors_bytes("b", [3.0, 4.0]),
            "tokenizer.json": tok,
        }},
        "refs": {"main": c3},
    }
    c4 = fake_commit("gated-1")
    gated = {
        "commits": {c4: {
            "config.json": b'{"model_type": "tiny", "hidden_size": 3}\n',
            "model.safetensors": safetensors_bytes("g", [5.0, 6.0, 7.0]),
        }},
        "refs": {"main": c4},
        "gated": True,
    }
    c5 = fake_commit("faulty-1")
    big = bytes((i * 7 + 3) % 251 for i in range(256 * 1024))
    faulty = {
        "commits": {c5: {
            "config.json": b'{"model_type": "tiny"}\n',
            "flaky.safetensors": big,
            "corrupt.safetensors": big[: 64 * 1024],
            "norange.safetensors": big[: 32 * 1024],
        }},
        "refs": {"main": c5},
    }
    c6 = fake_commit("evil-1")
    evil = {
        "commits": {c6: {"config.json": b"{}\n", "other.json": b"{}\n"}},
        "refs": {"main": c6},
    }
    return {"ember-test/tiny": tiny, "ember-test/sharded": sharded, "ember-test/gated": gated,
            "ember-test/faulty": faulty, "ember-test/evil": evil}


REPOS = build_repos()
RENAMED = {"ember-test/old-name": "ember-test/tiny"}
BLOBS = {}  # sha256 -> (bytes the CDN serves, whether it drops the connection half way)
for _repo in REPOS.values():
    for _files in _repo["commits"].values():
        for _path, _content in _files.items():
            if is_lfs(_path):
                served = _content
                if _path == "corrupt.safetensors":
                    served = bytes(b ^ 0x5A for b in _content)
                BLOBS[hashlib.sha256(_content).hexdigest()] = (served, _path)


def git_blob_sha1(content):
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class State:
    log_file = None
    log_lock = threading.Lock()
    cdn_port = 0


def log_request(origin, handler, status):
    if not State.log_file:
        return
    entry = {"origin": origin, "method": handler.command, "path": handler.path, "status": status,
             "range": handler.headers.get("Range"),
             "auth": handler.headers.get("Authorization")}
    with State.log_lock:
        with open(State.log_file, "a") as f:
            f.write(json.dumps(entry) + "\n")


class HubHandler(BaseHTTPRequestHandler):
    server_version = "ember-test-hub/1.0"

    def log_message(self, fmt, *args):  # quiet: the JSON log is the record
        pass

    def answer(self, status, headers, body=b""):
        log_request("hub", self, status)  # before answering: a client that got it sees the line
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def error(self, status, code, message, commit=None):
        headers = {"X-Error-Code": code, "X-Error-Message": message,
                   "Content-Type": "application/json"}
        if commit:
            headers["X-Repo-Commit"] = commit
        self.answer(status, headers, json.dumps({"error": message}).encode())

    def do_HEAD(self):
        self.serve()

    def do_GET(self):
        self.serve()

    def serve(self):
        path = urlsplit(self.path).path
        parts = path.lstrip("/").split("/", 4)
        if len(parts) < 5 or parts[2] != "resolve":
            # one-segment repo ids are not used by the tests
            self.error(404, "EntryNotFound", "Not a resolve URL")
            return
        repo_id = parts[0] + "/" + parts[1]
        revision = unquote(parts[3])
        filename = unquote(parts[4])
        if repo_id in RENAMED:
            # a renamed repo: the Hub redirects to the new name, on the same host (relative URL)
            new = "/%s/resolve/%s" % (RENAMED[repo_id], path.lstrip("/").split("/", 3)[3])
            self.answer(307, {"Location": new, "X-Error-Message": "Moved"}, b"")
            return
        repo = REPOS.get(repo_id)
        if repo is None:
            # The Hub answers 401 for a repo that does not exist (or is private) without a token.
            self.error(401, "RepoNotFound", "Repository not found")
            return
        if repo.get("gated"):
            auth = self.headers.get("Authorization")
            if auth is None:
                self.error(401, "GatedRepo", "Access to model %s is restricted. You must have "
                           "access to it and be authenticated to access it. Please log in." % repo_id)
                return
            if auth != "Bearer " + GATED_TOKEN:
                self.error(403, "GatedRepo", "Access to model %s is restricted and you are not in "
                           "the authorized list. Visit https://huggingface.co/%s to ask for access."
                           % (repo_id, repo_id))
                return
        commit = repo["refs"].get(revision)
        if commit is None and revision in repo["commits"]:
            commit = revision
        if commit is None:
            self.error(404, "RevisionNotFound", "Invalid rev id: " + revision)
            return
        files = repo["commits"][commit]
        if filename not in files:
            self.error(404, "EntryNotFound", "Entry not found", commit=commit)
            return
        content = files[filename]
        headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes",
                   "Access-Control-Expose-Headers": "X-Repo-Commit,X-Request-Id,X-Error-Code,"
                   "X-Error-Message,X-Total-Count,ETag,Link,Accept-Ranges,Content-Range,"
                   "X-Linked-Size,X-Linked-ETag,X-Xet-Hash"}
        if repo_id == "ember-test/evil":
            if filename == "config.json":
                headers["ETag"] = '"../../../../escaped"'
            else:
                headers["X-Repo-Commit"] = "../../../escaped"
        if is_lfs(filename):
            sha = hashlib.sha256(content).hexdigest()
            headers.setdefault("ETag", '"%s"' % sha)
            headers["X-Linked-Etag"] = '"%s"' % sha
            headers["X-Linked-Size"] = str(len(content))
            host = self.headers.get("Host", "127.0.0.1").rsplit(":", 1)[0]
            headers["Location"] = ("http://%s:%d/blobs/%s?X-Amz-Signature=test&name=%s"
                                   % (host, State.cdn_port, sha, filename.replace("/", "%2F")))
            headers["Content-Type"] = "text/plain; charset=utf-8"
            self.answer(302, headers, b"Found. Redirecting")
            return
        headers.setdefault("ETag", '"%s"' % git_blob_sha1(content))
        headers["Content-Type"] = "text/plain; charset=utf-8"
        headers["Content-Disposition"] = 'inline; filename="%s"' % filename.rsplit("/", 1)[-1]
        self.answer(200, headers, content)


class CdnHandler(BaseHTTPRequestHandler):
    server_version = "ember-test-cdn/1.0"

    def log_message(self, fmt, *args):
        pass

    def do_HEAD(self):
        self.serve()

    def do_GET(self):
        self.serve()

    def serve(self):
        path = urlsplit(self.path).path
        if not path.startswith("/blobs/") or path[len("/blobs/"):] not in BLOBS:
            log_request("cdn", self, 404)
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        sha = path[len("/blobs/"):]
        served, name = BLOBS[sha]
        flaky = name == "flaky.safetensors"
        start = 0
        rng = self.headers.get("Range")
        if name == "norange.safetensors":
            rng = None  # like a CDN that ignores Range: the whole file, 200
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[len("bytes="):-1])
        if start > len(served):
            log_request("cdn", self, 416)
            self.send_response(416)
            self.send_header("Content-Range", "bytes */%d" % len(served))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status = 206 if rng else 200
        log_request("cdn", self, status)
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("ETag", '"%s"' % sha)
        self.send_header("Accept-Ranges", "bytes")
        if rng:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(served) - 1, len(served)))
        self.send_header("Content-Length", str(len(served) - start))
        self.end_headers()
        if self.command == "HEAD":
            return
        body = served[start:]
        if flaky and start == 0:
            # Drop the connection half way: the client has to resume with a Range request.
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass
            return
        self.wfile.write(body)


def start(hub_port=0, cdn_port=0):
    """Starts both servers in daemon threads; returns (hub_server, cdn_server)."""
    cdn = ThreadingHTTPServer(("127.0.0.1", cdn_port), CdnHandler)
    State.cdn_port = cdn.server_address[1]
    hub = ThreadingHTTPServer(("127.0.0.1", hub_port), HubHandler)
    for s in (cdn, hub):
        s.daemon_threads = True
        threading.Thread(target=s.serve_forever, daemon=True).start()
    return hub, cdn


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log")
    args = ap.parse_args()
    State.log_file = args.log
    hub, cdn = start()
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d %d\n" % (hub.server_address[1], cdn.server_address[1]))
    os.replace(tmp, args.port_file)
    parent = os.getppid()
    while not done.wait(0.5):
        if os.getppid() != parent:  # the test that started us is gone
            break
    hub.shutdown()
    cdn.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
