"""A fake Hugging Face hub for the tests, speaking the hub's URL scheme and
headers, so that tern's downloader and huggingface_hub can both be pointed at
it with HF_ENDPOINT:

  GET  /api/models/ORG/NAME/revision/REV   {"id", "sha", "siblings": [{"rfilename"}]}
  HEAD /ORG/NAME/resolve/REV/FILE          a regular file: 200, ETag = its git blob id, Content-Length
                                           an LFS file: 302 to /cdn/SHA256 (an absolute URL), with
                                           X-Linked-Etag = the sha256, X-Linked-Size, ETag
                                           both carry X-Repo-Commit
  GET  /ORG/NAME/resolve/REV/FILE          the same, with the body of regular files
  GET  /cdn/SHA256                         an LFS file's bytes, with Range (206) support
  old names (renamed repos)                307 to the new name with a relative Location

Errors as the hub sends them: 401 for a private repo without the right token,
404 with X-Error-Code RepoNotFound / RevisionNotFound / EntryNotFound.
Faults to inject, each used once: cut the connection after N bytes of a file,
send a file's bytes corrupted. Every request is recorded."""

import hashlib
import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_SUFFIXES = (".safetensors", ".model", ".gguf", ".bin")


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeRepo:
    def __init__(self, repo_id, files, private=False):
        self.repo_id = repo_id
        self.files = dict(files)  # name -> bytes
        self.private = private
        self.commit = hashlib.sha1(repo_id.encode() + "".join(sorted(self.files)).encode()).hexdigest()
        self.branches = {"main": self.commit}

    def is_lfs(self, name):
        return name.endswith(LFS_SUFFIXES)

    def sha256(self, name):
        return hashlib.sha256(self.files[name]).hexdigest()


class FakeHub:
    def __init__(self):
        self.repos = {}
        self.renamed = {}  # old repo id -> new repo id
        self.token = "hf_good_token"
        self.cut_after = {}  # file name -> bytes to send before cutting the connection (once)
        self.corrupt_once = set()  # file names whose next body is corrupted
        self.hidden = set()  # files the file list names but resolve answers 404 for
        self.announced_size_delta = {}  # file name -> bytes added to the size its HEAD announces
        self.broken_file_list = False  # the file list answers 200 with a body that is not JSON
        self.requests = []  # (method, path, headers)
        self.lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub.handle(self, head=True)

            def do_GET(self):
                hub.handle(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # LFS downloads go to a "CDN" on another host name, as on the real hub.
        self.cdn_url = f"http://localhost:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def add_repo(self, repo):
        self.repos[repo.repo_id] = repo
        return repo

    def gets(self, pattern=""):
        """Paths of GET requests (resolve and CDN) matching a regex."""
        with self.lock:
            return [p for m, p, _ in self.requests if m == "GET" and re.search(pattern, p)]

    def clear(self):
        with self.lock:
            self.requests.clear()

    # --- request handling -------------------------------------------------

    def handle(self, h, head):
        path = urllib.parse.urlsplit(h.path).path
        with self.lock:
            self.requests.append(("HEAD" if head else "GET", path, dict(h.headers)))
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/(.+)", path)
        if m:
            return self.repo_info(h, head, m.group(1), urllib.parse.unquote(m.group(2)))
        m = re.fullmatch(r"/cdn/([0-9a-f]{64})", path)
        if m:
            return self.cdn(h, head, m.group(1))
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            return self.resolve(h, head, m.group(1), urllib.parse.unquote(m.group(2)), urllib.parse.unquote(m.group(3)))
        self.send(h, head, 404, b"Not Found")

    def send(self, h, head, status, body=b"", headers=None):
        h.send_response(status)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        if "Content-Length" not in (headers or {}):
            h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head and body:
            h.wfile.write(body)

    def error(self, h, head, status, code, message):
        body = json.dumps({"error": message}).encode()
        self.send(h, head, status, body, {"X-Error-Code": code, "X-Error-Message": message,
                                          "Content-Type": "application/json"})

    def find_repo(self, h, head, repo_id, redirect_to):
        """The repo, or None after answering with a redirect or an error."""
        if repo_id in self.renamed:
            self.send(h, head, 307, b"", {"Location": redirect_to(self.renamed[repo_id])})
            return None
        repo = self.repos.get(repo_id)
        authorized = h.headers.get("Authorization") == f"Bearer {self.token}"
        if repo is None or (repo.private and not authorized):
            # As the hub: a missing or private repo is 401 to a request without the right token.
            if not authorized:
                self.error(h, head, 401, "RepoNotFound", "Repository Not Found for url.")
            else:
                self.error(h, head, 404, "RepoNotFound", "Repository Not Found for url.")
            return None
        return repo

    def commit_of(self, repo, revision):
        if revision in repo.branches:
            return repo.branches[revision]
        return revision if revision == repo.commit else None

    def repo_info(self, h, head, repo_id, revision):
        repo = self.find_repo(h, head, repo_id, lambda new: f"/api/models/{new}/revision/{revision}")
        if repo is None:
            return
        commit = self.commit_of(repo, revision)
        if commit is None:
            return self.error(h, head, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
        if self.broken_file_list:
            return self.send(h, head, 200, b'{"id": "' + repo.repo_id.encode() + b'", "sib', {})
        body = json.dumps({"id": repo.repo_id, "modelId": repo.repo_id, "sha": commit, "private": repo.private,
                           "siblings": [{"rfilename": n} for n in repo.files]}).encode()
        self.send(h, head, 200, body, {"Content-Type": "application/json"})

    def resolve(self, h, head, repo_id, revision, name):
        quoted = urllib.parse.quote(name)
        repo = self.find_repo(h, head, repo_id, lambda new: f"/{new}/resolve/{revision}/{quoted}")
        if repo is None:
            return
        commit = self.commit_of(repo, revision)
        if commit is None:
            return self.error(h, head, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
        if name not in repo.files or name in self.hidden:
            return self.error(h, head, 404, "EntryNotFound", f"{name} does not exist on {revision}")
        data = repo.files[name]
        if repo.is_lfs(name):
            sha = repo.sha256(name)
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {len(data)}\n".encode()
            return self.send(h, head, 302, b"", {
                "Location": f"{self.cdn_url}/cdn/{sha}", "ETag": f'"{git_blob_id(pointer)}"',
                "X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data) + self.announced_size_delta.get(name, 0)),
                "X-Repo-Commit": commit})
        self.send(h, head, 200, self.body_for(name, data), {
            "ETag": f'"{git_blob_id(data)}"', "X-Repo-Commit": commit, "Content-Type": "text/plain"})

    def cdn(self, h, head, sha):
        for repo in self.repos.values():
            for name, data in repo.files.items():
                if repo.is_lfs(name) and repo.sha256(name) == sha:
                    return self.serve_range(h, head, name, data, sha)
        self.send(h, head, 404, b"Not Found")

    def body_for(self, name, data):
        with self.lock:
            if name in self.corrupt_once:
                self.corrupt_once.discard(name)
                return bytes(b ^ 0x5A for b in data[:64]) + data[64:]
        return data

    def serve_range(self, h, head, name, data, sha):
        start = 0
        m = re.fullmatch(r"bytes=(\d+)-", h.headers.get("Range", ""))
        if m:
            start = int(m.group(1))
            if start >= len(data):
                return self.send(h, head, 416, b"", {"Content-Range": f"bytes */{len(data)}"})
        body = self.body_for(name, data)[start:]
        headers = {"ETag": f'"{sha}"', "Accept-Ranges": "bytes", "Content-Length": str(len(body)),
                   "Content-Type": "application/octet-stream"}
        if m:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        h.send_response(206 if m else 200)
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        if head:
            return
        with self.lock:
            cut = self.cut_after.pop(name, None)
        if cut is not None:
            h.wfile.write(body[:cut])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)  # socket.SHUT_RDWR: the client sees the body end early
            return
        h.wfile.write(body)
