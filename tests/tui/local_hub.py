"""A tiny Hugging Face Hub on loopback for download tests: the endpoints huggingface_hub
calls (`/api/models/{repo}[/revision/{rev}]`, `/api/models/{repo}/tree/...`,
`/{repo}/resolve/{rev}/{file}` with X-Repo-Commit and ETag headers) for one model repo, files
served in small throttled chunks so a progress bar visibly moves."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "a" * 40


class LocalHub:
    """Serves `files` of `repo` at http://127.0.0.1:<port>. With `fail=True` the tree lists
    the files but downloading them answers 404 EntryNotFound (a failure without retries)."""

    def __init__(self, repo: str, files: dict[str, bytes], *, chunk: int = 64 << 10,
                 delay_s: float = 0.01, fail: bool = False) -> None:
        self.repo, self.files, self.chunk, self.delay_s, self.fail = repo, files, chunk, delay_s, fail
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _json(self, obj: object, status: int = 200) -> None:
                body = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _missing(self, code: str) -> None:
                self.send_response(404)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _route(self, head: bool) -> None:
                path = self.path.split("?", 1)[0]
                api = f"/api/models/{hub.repo}"
                if path.startswith(api + "/tree/"):
                    return self._json([
                        {"type": "file", "oid": hashlib.sha1(data).hexdigest(), "size": len(data), "path": name,
                         "lfs": {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}}
                        for name, data in hub.files.items()
                    ])
                if path == api or path.startswith(api + "/revision/"):
                    return self._json({"id": hub.repo, "sha": COMMIT, "siblings": [{"rfilename": n} for n in hub.files]})
                prefix = f"/{hub.repo}/resolve/"
                if not path.startswith(prefix):
                    return self._missing("RepoNotFound")
                name = path[len(prefix):].split("/", 1)[1]
                data = None if hub.fail else hub.files.get(name)
                if data is None:
                    return self._missing("EntryNotFound")
                self.send_response(200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Content-Disposition", f'attachment; filename="{name}";')
                self.end_headers()
                if head:
                    return None
                try:
                    for i in range(0, len(data), hub.chunk):
                        self.wfile.write(data[i:i + hub.chunk])
                        time.sleep(hub.delay_s)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                return None

            def do_GET(self) -> None:
                self._route(head=False)

            def do_HEAD(self) -> None:
                self._route(head=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LocalHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
