"""A small Hugging Face Hub on 127.0.0.1 (threaded, port 0) for the real huggingface_hub
client: the endpoints it calls (`/api/models/{repo}[/revision/{rev}]`,
`/api/models/{repo}/tree/{rev}[/{path}]`, `/{repo}/resolve/{rev}/{file}`) with the headers it
reads (X-Repo-Commit, ETag, Content-Length, Accept-Ranges and Content-Range for resumes)."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

COMMIT = "a" * 40


@dataclass
class HubFile:
    """A file the fake hub serves."""

    data: bytes | None = None
    source: Path | None = None
    """Serve bytes from this file instead of `data` (large real GGUFs)."""
    lfs: bool = True
    corrupt: bool = False
    """Serve different bytes under the true sha256 (a checksum mismatch)."""
    drop_after: int | None = None
    """Close the connection after this many body bytes..."""
    drops_left: int = 0
    """...this many times (then serve normally)."""
    delay_s: float = 0.0
    """Sleep between pieces (lets a test cancel mid-file)."""

    @property
    def size(self) -> int:
        return self.source.stat().st_size if self.source else len(self.data or b"")

    @property
    def sha256(self) -> str:
        if self.source:
            h = hashlib.sha256()
            with open(self.source, "rb") as f:
                while chunk := f.read(8 << 20):
                    h.update(chunk)
            return h.hexdigest()
        return hashlib.sha256(self.data or b"").hexdigest()

    def read(self, start: int, end: int) -> bytes:
        if self.source:
            with open(self.source, "rb") as f:
                f.seek(start)
                return f.read(end - start)
        data = self.data or b""
        if self.corrupt:
            data = bytes(b ^ 0xFF for b in data)
        return data[start:end]


@dataclass
class FakeHub:
    """State of the local hub: repos, files, request log."""

    repos: dict[str, dict[str, HubFile]] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    url: str = ""
    piece: int = 64 << 10
    _sha: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, repo: str, path: str, f: HubFile) -> HubFile:
        self.repos.setdefault(repo, {})[path] = f
        self._sha[(repo, path)] = f.sha256
        return f

    def sha(self, repo: str, path: str) -> str:
        return self._sha[(repo, path)]


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _json(self, status: int, body: object, error_code: str | None = None) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            if error_code:
                self.send_header("X-Error-Code", error_code)
                self.send_header("X-Error-Message", str(body))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(raw)

        def _repo_or_error(self, repo: str) -> dict[str, HubFile] | None:
            if repo in hub.gated:
                self._json(403, {"error": f"Access to model {repo} is restricted."}, "GatedRepo")
                return None
            if repo not in hub.repos:
                self._json(404, {"error": "Repository not found"}, "RepoNotFound")
                return None
            return hub.repos[repo]

        def do_HEAD(self) -> None:
            self._serve()

        def do_GET(self) -> None:
            self._serve()

        def _serve(self) -> None:
            url = urlparse(self.path)
            path = unquote(url.path)
            hub.requests.append((self.command, path, self.headers.get("Range")))
            m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$", path)
            if m:
                files = self._repo_or_error(m.group(1))
                if files is None:
                    return
                prefix = m.group(3) or ""
                entries = []
                for p, f in sorted(files.items()):
                    if prefix and not p.startswith(prefix.rstrip("/") + "/"):
                        continue
                    entry: dict[str, object] = {"type": "file", "oid": hashlib.sha1(p.encode()).hexdigest(),
                                                "size": f.size, "path": p}
                    if f.lfs:
                        entry["lfs"] = {"oid": hub.sha(m.group(1), p), "size": f.size, "pointerSize": 134}
                    entries.append(entry)
                self._json(200, entries)
                return
            m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$", path)
            if m:
                files = self._repo_or_error(m.group(1))
                if files is None:
                    return
                self._json(200, {"id": m.group(1), "sha": COMMIT, "siblings": [{"rfilename": p} for p in files]})
                return
            m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if not m:
                self._json(404, {"error": "not found"})
                return
            files = self._repo_or_error(m.group(1))
            if files is None:
                return
            f = files.get(m.group(3))
            if f is None:
                self._json(404, {"error": "Entry not found"}, "EntryNotFound")
                return
            size = f.size
            start = 0
            rng = self.headers.get("Range")
            if rng:
                rm = re.match(r"bytes=(\d+)-(\d*)", rng)
                assert rm, rng
                start = int(rm.group(1))
                end = int(rm.group(2)) + 1 if rm.group(2) else size
                end = min(end, size)
            else:
                end = size
            self.send_response(206 if rng else 200)
            self.send_header("X-Repo-Commit", COMMIT)
            etag = hub.sha(m.group(1), m.group(3)) if f.lfs else hashlib.sha1(m.group(3).encode()).hexdigest()
            self.send_header("ETag", f'"{etag}"')
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Disposition", f'attachment; filename="{Path(m.group(3)).name}";')
            self.send_header("Content-Length", str(end - start))
            if rng:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            self.end_headers()
            if self.command == "HEAD":
                return
            pos = start
            sent = 0
            while pos < end:
                if f.drop_after is not None and f.drops_left > 0 and sent >= f.drop_after:
                    f.drops_left -= 1
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                piece = f.read(pos, min(end, pos + hub.piece))
                try:
                    self.wfile.write(piece)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return
                pos += len(piece)
                sent += len(piece)
                if f.delay_s:
                    time.sleep(f.delay_s)

    return Handler


def start_hub() -> tuple[FakeHub, ThreadingHTTPServer]:
    """Start a hub on a free loopback port; stop it with server.shutdown()."""
    state = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return state, server
