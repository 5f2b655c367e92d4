"""A git remote over HTTP on 127.0.0.1: git's own ``git http-backend`` behind the standard
library's ``http.server``, serving the bare repositories under a folder. Like GitHub it answers
401 to a request without the token's basic credentials, and it records the Authorization headers
of every request, so a test sees what git sent."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def basic_credentials(token: str) -> str:
    """The Authorization header git sends for the token (as actions/checkout configures it)."""
    return "basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()


class FakeGitServer:
    def __init__(self, root: Path, token: str) -> None:
        self.root = root
        self.expected = basic_credentials(token)
        self.authorizations: list[list[str]] = []  # each request's, all of them
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> "FakeGitServer":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _backend(self, method: str, target: str, headers, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        """The CGI exchange with ``git http-backend``: its header lines, a Status among them, then the content."""
        path, _, query = target.partition("?")
        environment = {
            "PATH": os.environ["PATH"],
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "REQUEST_METHOD": method,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_CONTENT_ENCODING": headers.get("Content-Encoding", ""),
            "GIT_PROTOCOL": headers.get("Git-Protocol", ""),
            "REMOTE_USER": "x-access-token",
            "REMOTE_ADDR": "127.0.0.1",  # a user: http-backend then accepts pushes
        }
        done = subprocess.run(["git", "http-backend"], input=body, env=environment, capture_output=True, timeout=60)
        head, _, content = done.stdout.partition(b"\r\n\r\n")
        status, fields = 200, []
        for line in head.decode().splitlines():
            name, _, value = line.partition(": ")
            if name.lower() == "status":
                status = int(value.split()[0])
            else:
                fields.append((name, value))
        return status, fields, content

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                sent = self.headers.get_all("Authorization") or []
                with fake._lock:
                    fake.authorizations.append(sent)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if sent != [fake.expected]:
                    status, fields, content = 401, [("WWW-Authenticate", 'Basic realm="fake"')], b""
                else:
                    status, fields, content = fake._backend(self.command, self.path, self.headers, body)
                self.send_response(status)
                for name, value in fields:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = _serve

            def log_message(self, format, *args) -> None:
                """Quiet: the test reads the recorded headers instead."""

        return Handler
