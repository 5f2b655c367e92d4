"""A fake of the GitHub REST endpoints ``gradfix pr`` uses, served on 127.0.0.1 by the standard
library's ``http.server``. It keeps pull requests in memory, records every request, and can be
told to answer the next requests with given failures first."""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


@dataclass
class Recorded:
    method: str
    path: str  # with its query
    body: dict | None
    authorization: str | None

    def __str__(self) -> str:
        shown = ""
        if self.body is not None:
            fields = {k: (f"<{len(v)} characters>" if k == "body" else v) for k, v in self.body.items()}
            shown = " " + json.dumps(fields)
        return f"{self.method} {self.path}{shown}"


@dataclass
class Scripted:
    """One answer given in place of the fake's own. ``body`` is sent as JSON, except a string,
    sent as it is as an HTML page (a proxy's or a login page); a callable gets the request and
    returns the body (a server that echoes what it was sent)."""

    status: int
    body: dict | list | str | Callable[[Recorded], dict] = field(default_factory=dict)
    headers: dict = field(default_factory=dict)


class FakeGitHub:
    def __init__(self, repository: str, token: str) -> None:
        self.repository, self.token = repository, token
        self.owner = repository.split("/")[0]
        self.requests: list[Recorded] = []
        self.pulls: dict[int, dict] = {}
        self.scripted: list[Scripted] = []  # answered, in order, before the fake's own answers
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> "FakeGitHub":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()

    def open_pull(self, branch: str, base: str, title: str = "an old title", body: str = "an old body") -> dict:
        """A pull request that exists before the run."""
        number = len(self.pulls) + 1
        self.pulls[number] = {
            "number": number,
            "html_url": f"https://github.test/{self.repository}/pull/{number}",
            "title": title,
            "body": body,
            "state": "open",
            "draft": False,
            "head": {"ref": branch, "label": f"{self.owner}:{branch}"},
            "base": {"ref": base},
            "labels": [],
        }
        return self.pulls[number]

    def log(self) -> list[str]:
        return [str(r) for r in self.requests]

    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method != "GET"]

    # serving -----------------------------------------------------------------------------------
    def _answer(self, method: str, path: str, body: dict | None, authorization: str | None) -> tuple[int, object, dict]:
        with self._lock:
            recorded = Recorded(method, path, body, authorization)
            self.requests.append(recorded)
            if self.scripted:
                canned = self.scripted.pop(0)
                answer = canned.body(recorded) if callable(canned.body) else canned.body
                return canned.status, answer, canned.headers
            if authorization != f"Bearer {self.token}":
                return 401, {"message": "Bad credentials"}, {}
            return self._route(method, path, body or {})

    def _route(self, method: str, path: str, body: dict) -> tuple[int, object, dict]:
        parts = urllib.parse.urlsplit(path)
        prefix = f"/repos/{self.repository}"
        if method == "GET" and parts.path == f"{prefix}/pulls":
            query = urllib.parse.parse_qs(parts.query)
            head, state = query["head"][0], query.get("state", ["open"])[0]
            return 200, [p for p in self.pulls.values() if p["head"]["label"] == head and p["state"] == state], {}
        if method == "POST" and parts.path == f"{prefix}/pulls":
            if any(p["head"]["ref"] == body["head"] and p["state"] == "open" for p in self.pulls.values()):
                message = f"A pull request already exists for {self.owner}:{body['head']}."
                return 422, {"message": "Validation Failed", "errors": [{"resource": "PullRequest", "code": "custom", "message": message}]}, {}
            pull = self.open_pull(body["head"], body["base"], body["title"], body["body"])
            pull["draft"] = body.get("draft", False)
            return 201, pull, {}
        if match := re.fullmatch(rf"{prefix}/pulls/(\d+)", parts.path):
            pull = self.pulls.get(int(match[1]))
            if method != "PATCH" or pull is None:
                return 404, {"message": "Not Found"}, {}
            for key in ("title", "body", "state"):
                if key in body:
                    pull[key] = body[key]
            if "base" in body:
                pull["base"] = {"ref": body["base"]}
            return 200, pull, {}
        if match := re.fullmatch(rf"{prefix}/issues/(\d+)/labels", parts.path):
            pull = self.pulls.get(int(match[1]))
            if method != "POST" or pull is None:
                return 404, {"message": "Not Found"}, {}
            names = [label["name"] for label in pull["labels"]]
            pull["labels"] += [{"name": name} for name in body["labels"] if name not in names]
            return 200, pull["labels"], {}
        return 404, {"message": "Not Found"}, {}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                status, answer, headers = fake._answer(self.command, self.path, body, self.headers.get("Authorization"))
                page = isinstance(answer, str)
                data = answer.encode() if page else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html" if page else "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, format, *args) -> None:
                """Quiet: the test reads the recorded requests instead."""

        return Handler
