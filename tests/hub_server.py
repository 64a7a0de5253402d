"""A local Hugging Face Hub on 127.0.0.1 for tests: the endpoints huggingface_hub's
`snapshot_download` asks (a revision's commit, its file tree, each file's HEAD and GET
on `/{repo}/resolve/{revision}/{file}`), answered from repos held in memory, with every
request it saw; and `use_hub`, which points huggingface_hub at it and at a cache."""

import contextlib
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

REQUEST_TIMEOUT = 30  # seconds a connection may stay silent before the server drops it


class Repo:
    """A model repo: `commits` ({commit: {path: bytes}}), `refs` ({branch or tag:
    commit}); `gated` answers as a gated repo without access does."""

    def __init__(self, commits, refs, gated=False):
        self.commits, self.refs, self.gated = commits, refs, gated

    def commit(self, revision):
        return self.refs.get(revision) or (revision if revision in self.commits else None)


class HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT

    def do_GET(self):
        self.answer(body=True)

    def do_HEAD(self):
        self.answer(body=False)

    def log_message(self, *args):
        pass

    def answer(self, body):
        parts = urlsplit(self.path).path.strip("/").split("/")
        self.server.requests.append((self.command, unquote(urlsplit(self.path).path)))
        api = parts[:2] == ["api", "models"]
        repo_id = "/".join(parts[2:4] if api else parts[:2])
        repo = self.server.repos.get(repo_id)
        if repo is None or repo.gated:
            code = "GatedRepo" if repo is not None else "RepoNotFound"
            return self.send(401 if repo is not None else 404, {"error": code}, body, {"X-Error-Code": code})
        kind, revision = (parts[4], parts[5]) if api else (parts[2], parts[3])
        commit = repo.commit(unquote(revision))
        if commit is None:
            return self.send(404, {"error": "RevisionNotFound"}, body, {"X-Error-Code": "RevisionNotFound"})
        files = repo.commits[commit]
        if api and kind == "revision":
            siblings = [{"rfilename": name} for name in files]
            return self.send(200, {"id": repo_id, "sha": commit, "siblings": siblings}, body)
        if api and kind == "tree":
            tree = [
                {"type": "file", "path": name, "size": len(data), "oid": git_oid(data)} for name, data in files.items()
            ]
            return self.send(200, tree, body)
        name = unquote("/".join(parts[4:]))
        if kind != "resolve" or name not in files:
            return self.send(404, {"error": "EntryNotFound"}, body, {"X-Error-Code": "EntryNotFound"})
        headers = {"X-Repo-Commit": commit, "ETag": f'"{git_oid(files[name])}"'}
        return self.send(200, files[name], body, headers)

    def send(self, status, content, body, headers=None):
        data = content if isinstance(content, bytes) else json.dumps(content).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)


def git_oid(data):
    """The git blob id of `data`, which the Hub gives as a small file's ETag and tree oid."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@contextlib.contextmanager
def hub_server(repos):
    """Serves `repos` ({repo_id: Repo}) on a free port of 127.0.0.1 until the block ends;
    yields the server (`.url`, `.requests`: (method, path) of each request)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
    server.daemon_threads = True
    server.repos, server.requests = repos, []
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=REQUEST_TIMEOUT)


def use_hub(monkeypatch, home, endpoint=None):
    """Points huggingface_hub at the cache `home`/hub and at the Hub `endpoint` (None:
    offline, HF_HUB_OFFLINE=1), as HF_HOME, HF_ENDPOINT and HF_HUB_OFFLINE do in a new
    process: huggingface_hub reads them once, when imported, so its constants are set too."""
    from huggingface_hub import constants

    settings = {
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(home / "hub"),
        "HF_HUB_OFFLINE": "0" if endpoint else "1",
        "HF_ENDPOINT": endpoint or "http://127.0.0.1:9",
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr(constants, "HF_HOME", settings["HF_HOME"])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", settings["HF_HUB_CACHE"])
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", endpoint is None)
    monkeypatch.setattr(constants, "ENDPOINT", settings["HF_ENDPOINT"])
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", settings["HF_ENDPOINT"] + "/{repo_id}/resolve/{revision}/{filename}"
    )
