"""A stand-in for the Hugging Face Hub on 127.0.0.1 (ephemeral port): the part of its HTTP API that
huggingface_hub's own client uses to download files and read a model's metadata, so the REAL client runs
against it (HF_ENDPOINT / `endpoint=`):

  HEAD|GET /<prefix>/<org>/<name>/resolve/<revision>/<path>   X-Repo-Commit, ETag (the file's sha256),
                                                               Content-Length; GET honours `Range: bytes=N-`
  GET /<prefix>/api/models/<org>/<name>/revision/<revision>   model_info (siblings with size and LFS sha256)

A revision is a commit (40 hex) or a branch name (mapped to its commit). Faults for tests: `cut_after`
(file -> bytes: the next GET of that file stops after so many bytes, as a dropped connection does),
`fail` (files whose GET answers 500 while listed),
`corrupt` (files served with one byte flipped, same size). Every request is logged (method, path, Range).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

NON_LFS = {".gitattributes", "config.json", "model.safetensors.index.json", "README.md"}


class Repo:
    def __init__(self):
        self.commits: dict[str, dict[str, bytes]] = {}
        self.branches: dict[str, str] = {}

    def add(self, files: dict[str, bytes], branch: str = "main") -> str:
        commit = hashlib.sha1(json.dumps(sorted((k, hashlib.sha256(v).hexdigest()) for k, v in files.items())).encode()
                              + str(len(self.commits)).encode()).hexdigest()
        self.commits[commit] = dict(files)
        self.branches[branch] = commit
        return commit


class Hub:
    def __init__(self, prefix: str = ""):
        self.prefix = prefix.rstrip("/")
        self.repos: dict[str, Repo] = {}
        self.log: list[dict] = []
        self.cut_after: dict[str, int] = {}
        self.corrupt: set[str] = set()
        self.fail: set[str] = set()
        self.server: ThreadingHTTPServer | None = None

    # --- content -------------------------------------------------------------------------------------
    def add_directory(self, repo: str, directory: Path, branch: str = "main", extra: dict | None = None) -> str:
        files = {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}
        files.update(extra or {})
        return self.repos.setdefault(repo, Repo()).add(files, branch)

    def resolve(self, repo: str, revision: str) -> str | None:
        entry = self.repos.get(repo)
        if not entry:
            return None
        if revision in entry.commits:
            return revision
        return entry.branches.get(revision)

    # --- server --------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{self.prefix}"

    def start(self) -> "Hub":
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.answer(head=True)

            def do_GET(self):
                self.answer(head=False)

            def send_json(self, status, document):
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def answer(self, head):
                path = self.path.split("?", 1)[0]
                hub.log.append({"method": self.command, "path": path, "range": self.headers.get("Range"),
                                "sent": None})
                if not path.startswith(hub.prefix + "/"):
                    return self.send_json(404, {"error": "not under this endpoint's prefix"})
                path = path[len(hub.prefix):]
                info = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/([^/]+)", path)
                if info:
                    return self.model_info(*info.groups())
                resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if resolve:
                    return self.file(*resolve.groups(), head=head)
                self.send_json(404, {"error": "unknown route"})

            def model_info(self, repo, revision):
                commit = hub.resolve(repo, revision)
                if not commit:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "RevisionNotFound" if repo in hub.repos else "RepoNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                siblings = []
                for name, data in sorted(hub.repos[repo].commits[commit].items()):
                    entry = {"rfilename": name, "size": len(data), "blobId": hashlib.sha1(data).hexdigest()}
                    if name not in NON_LFS:
                        entry["lfs"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "pointerSize": 134}
                    siblings.append(entry)
                self.send_json(200, {"id": repo, "modelId": repo, "sha": commit, "siblings": siblings, "private": False})

            def file(self, repo, revision, name, head):
                commit = hub.resolve(repo, revision)
                files = hub.repos[repo].commits.get(commit) if commit else None
                if files is None or name not in files:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound" if files is not None else "RevisionNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = files[name]
                if name in hub.fail and not head:
                    return self.send_json(500, {"error": "stand-in fault: this file fails"})
                if name in hub.corrupt and data:
                    data = bytes([data[0] ^ 0xFF]) + data[1:]
                start = 0
                ranged = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                if ranged and not head:
                    start = int(ranged.group(1))
                body = data[start:]
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", commit)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(body)))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                if head:
                    return
                cut = hub.cut_after.pop(name, None)
                hub.log[-1]["sent"] = len(body) if cut is None else min(cut, len(body))
                if cut is not None:
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    import socket
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    def gets(self, name: str) -> list[dict]:
        return [e for e in self.log if e["method"] == "GET" and e["path"].endswith("/" + name)]
