"""A local Hugging Face Hub on 127.0.0.1 for tests: the endpoints huggingface_hub's
`snapshot_download` asks (a revision's commit, its file tree, each file's HEAD and GET
on `/{repo}/resolve/{revision}/{file}`) and those its `create_repo`, `create_branch` and
`upload_folder` post to (`/api/validate-yaml`, `/api/repos/create`, `/api/models/{repo}/branch/{branch}`,
`.../preupload/{revision}`, `.../commit/{revision}`: every file sent inline, as small
files are), answered from repos held in memory, with every request it saw; and
`use_hub`, which points huggingface_hub at it and at a cache."""

import base64
import contextlib
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
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

    def do_POST(self):
        """A write: refused without a token of the server's (401) or with a read-only
        one (403), as the Hub refuses them; else the repo, branch or commit is made."""
        path = unquote(urlsplit(self.path).path)
        data = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.requests.append((self.command, path))
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        access = self.server.tokens.get(token)
        if access is None:
            return self.send(401, {"error": "Invalid credentials in Authorization header"}, True)
        if access != "write":
            return self.send(403, {"error": "You don't have the rights to create a model under this namespace"}, True)
        if path == "/api/validate-yaml":
            return self.validate_yaml(json.loads(data)["content"])
        if path == "/api/repos/create":
            return self.create_repo(json.loads(data))
        parts = path.strip("/").split("/")
        repo_id, kind, revision = "/".join(parts[2:4]), parts[4], "/".join(parts[5:])
        repo = self.server.repos.get(repo_id)
        if repo is None:
            return self.send(404, {"error": "Repository not found"}, True, {"X-Error-Code": "RepoNotFound"})
        if kind == "branch":
            repo.refs.setdefault(revision, repo.refs["main"])
            return self.send(200, {}, True)
        if repo.commit(revision) is None:
            return self.send(404, {"error": "Invalid rev id"}, True, {"X-Error-Code": "RevisionNotFound"})
        if kind == "preupload":
            files = [
                {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in json.loads(data)["files"]
            ]
            return self.send(200, {"files": files}, True)
        return self.commit(repo_id, repo, revision, [json.loads(line) for line in data.splitlines() if line])

    def validate_yaml(self, content):
        """The card's metadata parsed by huggingface_hub's own reader; an error is a 400 as the Hub's."""
        from huggingface_hub import ModelCard

        self.server.cards.append(content)
        try:
            ModelCard(content, ignore_metadata_errors=False)
        except ValueError as error:
            return self.send(400, {"errors": [{"message": str(error)}]}, True)
        return self.send(200, {"errors": [], "warnings": []}, True)

    def create_repo(self, request):
        repo_id = f"{request['organization']}/{request['name']}" if request.get("organization") else request["name"]
        self.server.created.append(request)
        url = f"{self.server.url}/{repo_id}"
        if self.server.organizations is not None and request.get("organization") not in self.server.organizations:
            return self.send(404, {"error": "Organization not found"}, True)
        if repo_id in self.server.repos:
            return self.send(409, {"error": "You already created this model repo", "url": url}, True)
        first = hashlib.sha1(repo_id.encode()).hexdigest()  # the Hub's first commit: .gitattributes
        self.server.repos[repo_id] = Repo({first: {".gitattributes": b"*.safetensors filter=lfs\n"}}, {"main": first})
        return self.send(200, {"url": url, "name": repo_id}, True)

    def commit(self, repo_id, repo, revision, lines):
        """A commit of the files sent: the revision's files with these added, a new commit id."""
        header = next(line["value"] for line in lines if line["key"] == "header")
        files = dict(repo.commits[repo.commit(revision)])
        for line in lines:
            if line["key"] == "file":
                files[line["value"]["path"]] = base64.b64decode(line["value"]["content"])
        commit = hashlib.sha1(json.dumps([header, sorted(files)]).encode() + b"".join(files.values())).hexdigest()
        repo.commits[commit] = files
        repo.refs[revision] = commit
        self.server.commits.append({"repo_id": repo_id, "revision": revision, "summary": header["summary"]})
        return self.send(200, {"commitUrl": f"{self.server.url}/{repo_id}/commit/{commit}", "commitOid": commit}, True)

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
def hub_server(repos, tokens=None, organizations=None):
    """Serves `repos` ({repo_id: Repo}) on a free port of 127.0.0.1 until the block ends,
    taking writes from `tokens` ({token: "write" or "read"}) to repos of `organizations`
    (None: any); yields the server (`.url`,
    `.requests`: (method, path) of each request; `.created`: each create-repo request;
    `.commits`: repo_id, revision and summary of each commit; `.cards`: each README.md checked)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
    server.daemon_threads = True
    server.repos, server.requests, server.tokens = repos, [], tokens or {}
    server.created, server.commits, server.cards = [], [], []
    server.organizations = organizations
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


def cache_snapshot(home, repo_id, folder, commit="1" * 40):
    """The cache at `home`/hub holding `folder`'s files as `repo_id`'s main branch, as a
    first download leaves it: the real huggingface_hub downloads them from a local Hub.
    Returns the `HubSnapshot`."""
    import pytest

    from bert_keras.hub import resolve

    folder = Path(folder)
    files = {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    with (
        hub_server({repo_id: Repo({commit: files}, {"main": commit})}) as server,
        pytest.MonkeyPatch.context() as patch,
    ):
        use_hub(patch, Path(home), server.url)
        return resolve(repo_id)
