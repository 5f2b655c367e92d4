"""The fork server: the process ``ScriptRunner`` starts, which imports torch once and then forks a
child for every run asked of it (``script_child.py`` runs the script there), and cleans up what each
run left. A twin (``ScriptRunner.twin``) is a copy of a server forked from it, warm at once, that
serves pipes of its own.

Apart from ``runner.py`` because it runs in a process of its own, started with only the allowed
environment: nothing here runs in gradfix's process, and only the protocol and the request cross
from there. It is the subreaper of what its runs start, so a process a script starts stays below it
after ``setsid`` or a double fork, and the server kills all of it when the run ends; when gradfix
dies, SIGKILL included, the server kills what runs and removes the run's scratch folder.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from typing import Any

from .. import typed_json
from ..frameworks import FRAMEWORK_PACKAGES
from .runner import (
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_PDEATHSIG,
    _prctl,
    _receive,
    _regular_file_bytes,
    _Request,
    _send,
    _send_number,
)
from .script_child import _child_main

RESULT_LIMIT = 1 << 30  # bytes of a run's result read back; a bigger one is unreadable
KILL_PATIENCE = 5.0  # seconds the server keeps killing what a run left


def serve(parent: int) -> None:
    """The fork server of gradfix's process ``parent``: import torch once, then fork a child for
    every request on stdin, until stdin closes or ``parent`` dies."""
    _prctl(PR_SET_DUMPABLE, 0)  # it holds gradfix's pipes: no script opens them through /proc
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDWR)
    for descriptor in (0, 1):
        os.dup2(null, descriptor)  # stray output must not corrupt the protocol
    with contextlib.suppress(_ParentGone):
        _watch_parent(parent)
        # The point of this process: children start with torch imported. Building an optimizer
        # imports torch._dynamo lazily, which costs more than torch itself.
        import torch._dynamo  # noqa: F401
        import torch.nn  # noqa: F401
        import torch.optim  # noqa: F401

        _Server(requests, replies).serve()
    os._exit(0)  # at once: tearing down an interpreter that imported torch takes a second, for nothing


class _ParentGone(BaseException):
    """Raised in a server when the process it serves has died."""


def _watch_parent(parent: int) -> None:
    """Make this process the subreaper of what its runs start, and raise ``_ParentGone`` in it
    when ``parent`` dies, SIGKILL included. A SIGTERM while ``parent`` lives is ignored: the end of
    the thread that started the server sends one too, and gradfix ends a server by closing its
    requests."""

    def parent_gone(*_: Any) -> None:
        if os.getppid() != parent:
            raise _ParentGone

    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGTERM, parent_gone)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    parent_gone()  # it may have died before the signal was asked for


class _Server:
    """One server's requests and replies, the twins it forked and the scratch folder of its run."""

    def __init__(self, requests, replies) -> None:
        self.requests, self.replies = requests, replies
        self.twins: set[int] = set()  # they clean up after their own runs
        self.scratch: str | None = None

    def serve(self) -> None:
        """Answer requests until they end (gradfix closed them or died); leave nothing behind,
        whatever ends it."""
        try:
            while True:
                request = typed_json.loads(_receive(self.requests), _Request)
                if request.twin_pipes is not None:
                    self._forked_twin(*request.twin_pipes)
                else:
                    self._run(request)
        except (EOFError, BrokenPipeError):  # gradfix closed the pipes, or died
            pass
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self._kill_leftovers()
            self._remove_scratch()

    def _run(self, request: _Request) -> None:
        _import_frameworks_of(request.script)
        self.scratch = tempfile.mkdtemp(prefix="gradfix-run-")
        workdir = request.options.cwd or os.path.join(self.scratch, "cwd")
        os.makedirs(workdir, exist_ok=True)
        result_path = os.path.join(self.scratch, "result.json")
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                self._enter_child(server)
                _child_main(request, workdir, result_path)
            finally:
                os._exit(0)
        _send_number(self.replies, pid)
        _, status = os.waitpid(pid, 0)
        self._kill_leftovers()  # what the script left running, in its group or not
        written = _regular_file_bytes(result_path, RESULT_LIMIT + 1)
        self._remove_scratch()
        _send_number(self.replies, status)
        _send(self.replies, written)

    def _enter_child(self, server: int) -> None:
        os.setsid()  # its own session and process group: gradfix kills the group at a timeout
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != server:
            os._exit(0)
        self.requests.close()
        self.replies.close()
        _prctl(PR_SET_DUMPABLE, 1)  # the script's process is an ordinary one: it holds no pipe of gradfix's
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def _forked_twin(self, requests_path: str, replies_path: str) -> None:
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                self.requests.close()  # gradfix must see these end when this server ends
                self.replies.close()
                with contextlib.suppress(_ParentGone):
                    _watch_parent(server)
                    twin = _Server(open(requests_path, "rb", buffering=0), open(replies_path, "wb", buffering=0))
                    _send_number(twin.replies, os.getpid())
                    twin.serve()
            finally:
                os._exit(0)
        self.twins.add(pid)

    def _kill_leftovers(self) -> None:
        """Kill every process below this server but its twins and theirs: a run's child and, this
        server being their subreaper, whatever it started, whichever group or session they are in."""
        deadline = time.monotonic() + KILL_PATIENCE
        while True:
            left = _descendants(os.getpid(), self.twins)
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self._reap()
            if not left or time.monotonic() > deadline:
                return
            time.sleep(0.01)

    def _reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.twins.discard(pid)

    def _remove_scratch(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


def _descendants(root: int, excluded: set[int]) -> list[int]:
    """The live processes below ``root``, without the ``excluded`` ones and what is below them."""
    children: dict[int, list[int]] = {}
    zombies = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                state, parent = handle.read().rpartition(b")")[2].split()[:2]  # the name may hold ") "
        except (OSError, ValueError):
            continue  # it ended meanwhile
        children.setdefault(int(parent), []).append(int(name))
        if state == b"Z":
            zombies.add(int(name))
    found, pending = [], list(children.get(root, ()))
    while pending:
        pid = pending.pop()
        if pid in excluded:
            continue
        if pid not in zombies:
            found.append(pid)
        pending += children.get(pid, ())
    return found


def _import_frameworks_of(script: str) -> None:
    """Training frameworks cost seconds to import: import the ones a script imports into the
    server, once, so that this run and every later one forks with them loaded. A script that needs
    none (most) starts without paying for them."""
    source = _regular_file_bytes(script).decode(errors="replace")
    for framework in FRAMEWORK_PACKAGES:
        if framework not in sys.modules and re.search(rf"^\s*(?:import|from)\s+{framework}\b", source, re.MULTILINE):
            with contextlib.suppress(ImportError):
                importlib.import_module(framework)
