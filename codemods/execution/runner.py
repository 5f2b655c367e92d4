"""Running Python scripts in isolated children: the only place gradfix executes code.

Importing torch costs seconds, so scripts do not start from a fresh interpreter: a fork server
process imports torch once (and runs no torch op, so forking it is safe), and each script runs in
a child forked from it, with its own working directory, environment, time, memory, CPU-time and
process limits, its output captured. A child that hangs is killed; one that crashes is reported;
neither can take the caller down.

What a script is kept from (SECURITY.md says what it is not kept from: this is no sandbox):

* Secrets. The server starts with only the allowed part of gradfix's environment
  (``script_environment``), so neither its ``/proc/<pid>/environ`` nor its children's hold anything
  else; a variable the user passes by name (``RunOptions.pass_env``) is set in that run's child
  only. gradfix and the server make themselves non-dumpable, so a process of the same user cannot
  read their environment, memory or pipes through ``/proc`` (root can: run gradfix unprivileged).
* gradfix's process. Requests, replies and a run's result (which the script's own process writes)
  cross as JSON checked against their types (``typed_json``): nothing a script wrote is unpickled.
* Leftovers. The server is the subreaper of what its runs start, so a process the script starts
  stays below it after ``setsid`` or a double fork, and the server kills all of it when the run
  ends. When gradfix dies, SIGKILL included (``PR_SET_PDEATHSIG``), the server kills what runs and
  removes the run's scratch folder; a child dies with its server the same way, and a CPU-time limit
  stops what would spin on regardless. A candidate rewrite runs from memory (``RunOptions.sources``):
  nothing is written beside the script.

Inside the child, ``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped to count
backward calls per line, to stop the script cleanly after a number of successful steps, and, on
request, to force ``retain_graph=True``. Gradients seen at every optimizer step and the final
parameters can be recorded for comparing two programs.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import linecache
import math
import os
import re
import resource
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Mapping

from .. import typed_json
from ..frameworks import FRAMEWORK_PACKAGES

MEASURED_STEPS = 8  # a scan of the heap costs a quarter of a second; growth shows in a few steps
STOP_SHARE = 0.9  # of a run's time: a run still training then stops with what it showed; the rest kills one stuck elsewhere
COMPARED_STEPS = 8  # optimizer steps (backward calls without one) whose gradients a repair compares
RECENT_WALKS = 16  # backward calls kept to tell which one freed the graph a later call finds freed
TRACED_WALKS = 100  # backward calls whose leaves are noted: what a rewrite loses, it loses at once
PROCESS_HEADROOM = 1024  # processes and threads a script may add to what its user already runs
RESULT_LIMIT = 1 << 30  # bytes of a run's result read back; a bigger one is unreadable
KILL_PATIENCE = 5.0  # seconds the server keeps killing what a run left
OUTPUT_KEPT = 1 << 20  # bytes of a script's stdout, and of its stderr, a result keeps

# What a script gets of gradfix's environment without asking: where programs, libraries and Python
# packages are, the locale, temporary folders, and the settings of CUDA, thread pools and caches.
ALLOWED_ENVIRONMENT = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "LANG", "LANGUAGE", "TMPDIR", "TEMP", "TMP",
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONWARNINGS", "PYTHONDONTWRITEBYTECODE",
    "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH", "XDG_CACHE_HOME", "HF_HOME",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
})  # fmt: skip
ALLOWED_ENVIRONMENT_PREFIXES = (
    "LC_", "CUDA_", "NVIDIA_", "NCCL_", "CUBLAS_", "CUDNN_", "HIP_", "ROCR_", "TORCH_", "PYTORCH_",
    "OMP_", "MKL_", "KMP_", "OPENBLAS_",
)  # fmt: skip
# Allowed names can still hold a secret (TORCH_HUB_TOKEN, a proxy's password): those are left out.
_SECRET_WORDS = (
    "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "KEY", "CREDENTIAL", "CREDS", "COOKIE", "PRIVATE",
    "AUTHORIZATION", "BEARER", "SIGNATURE",
)  # fmt: skip
_SECRET_PARTS = frozenset({"PAT", "AUTH", "PWD", "PASS", "CRED", "DSN", "JWT", "SESSION", "OTP", "HMAC"})  # GH_PAT, not PATH

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36


@dataclass(frozen=True)
class RunOptions:
    args: tuple[str, ...] = ()
    timeout: float = 60.0
    memory_limit: int | None = 4 << 30  # bytes of address space on top of what torch has mapped
    max_steps: int | None = None  # stop after this many successful backward calls
    max_optimizer_steps: int | None = None  # stop after this many optimizer steps
    # Seconds after which the run stops at its next backward call or optimizer step, with what it
    # showed so far; ``timeout`` kills a run that reaches neither.
    stop_after: float | None = None
    retain_graph: bool = False  # force retain_graph=True on every backward
    record_gradients: bool = False
    recorded_steps: int | None = None  # with record_gradients: record this many optimizer steps (or backward calls), no final state
    measure_graphs: bool = False  # count the graph nodes live tensors hold, at every optimizer step
    detect_anomaly: bool = False
    count_lines: tuple[int, ...] = ()  # lines of the script whose executions are counted
    cwd: str | None = None  # default: a fresh, empty temporary folder
    env: tuple[tuple[str, str], ...] = ()
    pass_env: tuple[str, ...] = ()  # variables of gradfix's environment passed on though not allowed
    # Files run as though they held these bytes, the script or modules it imports (a candidate
    # rewrite): nothing is written beside the script.
    sources: tuple[tuple[str, bytes], ...] = ()
    threads: int | None = None  # torch's intra-op threads (runs side by side must not oversubscribe)


@dataclass
class Frame:
    line: int
    code: str
    path: str = ""  # the file, when it is a module beside the script rather than the script


@dataclass
class HeldGraph:
    """A value that held part of the freed graph when the run failed, reached by the code of one
    frame of the failing stack: what a rewrite can detach, reset or clear."""

    path: str  # the frame's file; "" for the script
    function_line: int  # the first line of the frame's function; 0 for the module's body
    expression: str  # how that code reaches it: a name, then attributes and items
    structure: str  # "tensor", "tuple", "namedtuple", "list", "dict", or "detachable" (an object with its own detach())
    tensor_parts: bool = True  # every part of a container is a tensor
    owner: str = ""  # the class of the object it is an attribute of
    only_freed: bool = False  # a tensor whose whole graph was freed (cutting it cuts nothing else)


@dataclass
class RunResult:
    status: str  # "ok", "error", "stopped" (step limit reached), "timeout", "crashed"
    error_type: str = ""
    error_message: str = ""
    traceback: str = ""
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0  # how long the script ran
    backward_calls: int = 0  # successful ones
    optimizer_steps: int = 0
    stopped_by: str = ""  # the bound that stopped a "stopped" run: "backward calls", "optimizer steps", "time"
    # Every call, by the innermost line of the user's code that made it: (its file, "" for the
    # script; the line). A call a module makes is that module line's, not the script line's that called in.
    backward_calls_by_line: dict[tuple[str, int], int] = field(default_factory=dict)
    failing_frames: list[Frame] = field(default_factory=list)  # script frames of the error, outermost first
    forward_frames: list[Frame] = field(default_factory=list)  # anomaly mode: where the failing node was made
    # Anomaly mode: the user's frames of the backward (or autograd.grad) call that freed the graph
    # the failing call found freed, outermost first.
    freeing_frames: list[Frame] = field(default_factory=list)
    # Anomaly mode: the user's frames of the forward that made a value the failing graph reads
    # from the freed one alone (its last operation's inputs were all freed), outermost first.
    reading_frames: list[Frame] = field(default_factory=list)
    # Anomaly mode: the user's frames of the forward that made a value the freeing call's graph
    # reads from the graph the failing call shares with it, outermost first: cut there, the
    # earlier call no longer walks (nor frees) what the failing one needs.
    freeing_reading_frames: list[Frame] = field(default_factory=list)
    # Anomaly mode: the values that held part of the freed graph when the run failed.
    held_graphs: list[HeldGraph] = field(default_factory=list)
    # Anomaly mode: the user's frames of the optimizer steps, which no rewrite may remove.
    step_frames: list[Frame] = field(default_factory=list)
    # The leaf tensors the run's backward calls asked gradients for (the failing call's included),
    # by labels that name the same tensor in another program that builds the same optimizers.
    reached_leaves: set[str] = field(default_factory=set)
    leaf_names: dict[str, str] = field(default_factory=dict)  # label -> a global name that reaches the leaf
    # The labels of ``reached_leaves`` by the backward call that reached them (its innermost line of
    # the user's code, as ``backward_site`` names it): the gradient paths a rewrite may remove.
    reached_by_backward: dict[str, set[str]] = field(default_factory=dict)
    gradients: list[tuple[str, list[float]]] = field(default_factory=list)  # at each optimizer step
    # After each backward, the gradients of the tensors the script's globals name, and which of
    # them the script updated: a script that steps its parameters by hand has no optimizer step.
    backward_gradients: list[tuple[str, list[float]]] = field(default_factory=list)
    updated_leaves: set[str] = field(default_factory=set)
    live_graph_nodes: list[int] = field(default_factory=list)  # at each optimizer step, if measured
    line_counts: dict[int, int] = field(default_factory=dict)  # executions of the counted lines

    @property
    def succeeded(self) -> bool:
        return self.status in ("ok", "stopped")

    def describe(self) -> str:
        if self.status == "error":
            return f"{self.error_type}: {self.error_message}"
        return {
            "ok": "ran to the end",
            "stopped": self._stopped(),
            "timeout": "did not finish in time (killed)",
            "crashed": "crashed: " + self.error_message,
        }[self.status]

    def _stopped(self) -> str:
        if self.stopped_by == "backward calls":
            return f"stopped after {self.backward_calls} backward call(s)"
        if self.stopped_by == "time":
            return f"stopped at the time bound, after {self.optimizer_steps} optimizer step(s)"
        return f"stopped after {self.optimizer_steps} optimizer step(s), the step bound"


_WRITTEN_BY_CHILD = ("ok", "error", "stopped")  # the statuses a run's own result may have


def script_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of ``environ`` a script gets without asking: the allowed names and prefixes, less
    any whose name or value looks like a secret."""
    return {
        name: value
        for name, value in environ.items()
        if (name in ALLOWED_ENVIRONMENT or name.startswith(ALLOWED_ENVIRONMENT_PREFIXES)) and not _looks_secret(name, value)
    }


def _looks_secret(name: str, value: str) -> bool:
    """Whether a variable's name says it holds a secret, or its value holds a URL's user
    information (``token@``, ``user:password@``) whatever the password holds (a slash, a space):
    an @ anywhere after a scheme, or anywhere in a proxy's setting, which may leave the scheme out
    (``user:password@proxy:3128``). The variable is dropped whole."""
    upper = name.upper()
    return (
        any(word in upper for word in _SECRET_WORDS)
        or not _SECRET_PARTS.isdisjoint(re.split(r"[^A-Z0-9]+", upper))
        or "@" in value.partition("://")[2]
        or (upper.endswith("_PROXY") and "@" in value)
    )


@dataclass(frozen=True)
class _Request:
    """What gradfix asks of a server: run ``script``, or, with ``twin_pipes``, fork a copy of
    itself that serves the two named pipes (requests, replies)."""

    script: str = ""
    options: RunOptions = RunOptions()
    passed_env: tuple[tuple[str, str], ...] = ()  # the values of ``options.pass_env``
    twin_pipes: tuple[str, str] | None = None


class ScriptRunner:
    """Runs scripts in children forked from one warm server process that has imported torch.

    Use as a context manager, or call ``close()``; the server starts on the first run."""

    def __init__(self) -> None:
        self._server: subprocess.Popen | _TwinServer | None = None
        self._running: int | None = None  # the pid of the run in progress
        self._stopping = False  # stop() was called: a run in progress, or starting, is killed

    def __enter__(self) -> "ScriptRunner":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        if self._server is not None:
            self._server.stdin.close()
            self._server.wait(10)
            self._server = None

    def _abandon(self) -> None:
        """Leave the server to end a run whose script gradfix cannot kill, not knowing its pid: the
        server kills it, and all it started, when gradfix's process ends (or reads these closed
        requests once the script has ended by itself). Waiting for the server here would outlast
        the script's run."""
        self._server.stdin.close()
        self._server = None

    def twin(self) -> "ScriptRunner":
        """Another runner whose server is forked from this one's, warm at once (frameworks this
        one imported included): for runs side by side. Close it like any runner."""
        server = self._started_server()
        twin = ScriptRunner()
        with tempfile.TemporaryDirectory(prefix="gradfix-twin-") as scratch:
            requests, replies = os.path.join(scratch, "requests"), os.path.join(scratch, "replies")
            os.mkfifo(requests)
            os.mkfifo(replies)
            _send(server.stdin, typed_json.dumps(_Request(twin_pipes=(requests, replies)), _Request))
            # Opened in the order the twin opens them, each open waiting for the other end. The
            # twin's pid comes on its own pipe, read at its first use: the server's next reply is
            # the pid of a run, and a run can start on the server while the twin is still read.
            twin._server = _TwinServer(open(requests, "wb", buffering=0), open(replies, "rb", buffering=0))
        return twin

    def _started_server(self) -> subprocess.Popen | _TwinServer:
        if self._server is None or self._server.poll() is not None:
            # From now on no process of this user (a script) reads gradfix's environment, memory or
            # pipes through /proc.
            _prctl(PR_SET_DUMPABLE, 0)
            self._server = subprocess.Popen(
                # -P: nothing is imported from the folder gradfix runs in (the checked tree, often).
                [sys.executable, "-P", "-c", f"from gradfix.codemods.execution.runner import serve; serve({os.getpid()})"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
                env=script_environment(os.environ),
                # Out of gradfix's process group: a signal to that group (a cancelled CI job,
                # Ctrl-C) reaches gradfix alone, and the server outlives gradfix to clean up.
                start_new_session=True,
            )
        return self._server

    def run(self, script: str | Path, options: RunOptions = RunOptions()) -> RunResult:
        server = self._started_server()
        request = _Request(
            str(Path(script).resolve()),
            replace(options, sources=tuple((str(Path(path).resolve()), source) for path, source in options.sources)),
            tuple((name, os.environ[name]) for name in options.pass_env if name in os.environ),
        )
        try:
            _send(server.stdin, typed_json.dumps(request, _Request))
            pid = self._running = _receive_number(server.stdout)
            if self._stopping:
                _kill_group(pid)
        except (EOFError, BrokenPipeError):
            self._server = None  # the next run starts a new one
            return RunResult("crashed", error_message="gradfix's runner process died (out of memory, or killed)")
        except BaseException:  # Ctrl-C, SIGTERM before the script's pid reached gradfix: it may run already
            self._abandon()
            raise
        try:
            timed_out = not _readable(server.stdout, options.timeout)
        except BaseException:  # Ctrl-C, SIGTERM: the script goes with gradfix
            _kill_group(pid)
            raise
        if timed_out:
            _kill_group(pid)
        try:
            status = _receive_number(server.stdout)
            written = _receive(server.stdout)
        except EOFError:
            _kill_group(pid)
            self._server = None
            return RunResult("crashed", error_message="gradfix's runner process died while the script ran")
        finally:
            self._running = None
        if timed_out:
            return RunResult("timeout")
        if written:
            return _written_result(written)
        if os.WIFSIGNALED(status):
            return RunResult("crashed", error_message=f"killed by signal {os.WTERMSIG(status)}")
        return RunResult("crashed", error_message=f"exit code {os.waitstatus_to_exitcode(status)}")

    def stop(self) -> None:
        """Kill the run in progress (from another thread), and any this runner starts after."""
        self._stopping = True
        if self._running is not None:
            _kill_group(self._running)


class RunBeside:
    """A run on a twin of ``runner`` (forked from its warm server, so warm at once), in a thread of
    its own: started beside the runner's own runs, its result taken when it is needed, or the run
    stopped when it is not. The twin closes when the run ends."""

    def __init__(self, runner: ScriptRunner, script: str | Path, options: RunOptions) -> None:
        self.options = options
        self._twin = runner.twin()
        self._result: RunResult | None = None
        self._thread = threading.Thread(target=self._run, args=(script,), daemon=True)
        self._thread.start()

    def _run(self, script: str | Path) -> None:
        try:
            self._result = self._twin.run(script, self.options)
        finally:
            self._twin.close()

    def result(self) -> RunResult:
        self._thread.join()
        return self._result if self._result is not None else RunResult("crashed", error_message="the run beside failed to start")

    def stop(self, wait: bool = True) -> None:
        """Kill the run, and wait for its thread (which closes the twin) unless gradfix is leaving
        (on a signal, an error): the twin's run then ends with gradfix's process."""
        self._twin.stop()
        if wait:
            self._thread.join()


def _written_result(written: bytes) -> RunResult:
    """The result the child wrote; the script ran in that process and may have written anything."""
    try:
        result = typed_json.loads(written, RunResult)
    except typed_json.UnexpectedData:
        result = None
    if result is None or result.status not in _WRITTEN_BY_CHILD:
        return RunResult("crashed", error_message="the run left a result gradfix cannot read")
    return result


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


def _regular_file_bytes(path: str, limit: int = -1) -> bytes:
    """The first ``limit`` bytes of ``path`` if it is a regular file, else none: a pipe, a device or
    a link put there (the script may have) must not block or flood the server."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    with os.fdopen(descriptor, "rb") as handle:
        return handle.read(limit) if stat.S_ISREG(os.fstat(descriptor).st_mode) else b""


class _TwinServer:
    """The end of a forked server's pipes, with the calls ``ScriptRunner`` makes of a ``Popen``."""

    def __init__(self, stdin, stdout) -> None:
        self.stdin, self.stdout = stdin, stdout

    @cached_property
    def pid(self) -> int:
        return _receive_number(self.stdout)  # the twin's first message

    def poll(self) -> int | None:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return 0
        return None

    def wait(self, timeout: float) -> None:
        """Nothing to wait for: with its requests closed the twin cleans up and leaves, and the
        server it was forked from reaps it."""
        self.stdout.close()


def _import_frameworks_of(script: str) -> None:
    """Training frameworks cost seconds to import: import the ones a script imports into the
    server, once, so that this run and every later one forks with them loaded. A script that needs
    none (most) starts without paying for them."""
    source = _regular_file_bytes(script).decode(errors="replace")
    for framework in FRAMEWORK_PACKAGES:
        if framework not in sys.modules and re.search(rf"^\s*(?:import|from)\s+{framework}\b", source, re.MULTILINE):
            with contextlib.suppress(ImportError):
                importlib.import_module(framework)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _prctl(option: int, value: int) -> None:
    if _libc().prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


@lru_cache(maxsize=None)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _send(stream, data: bytes) -> None:
    stream.write(struct.pack("!Q", len(data)) + data)
    stream.flush()


def _receive(stream) -> bytes:
    return _read_exactly(stream, struct.unpack("!Q", _read_exactly(stream, 8))[0])


def _send_number(stream, number: int) -> None:
    stream.write(struct.pack("!q", number))
    stream.flush()


def _receive_number(stream) -> int:
    return struct.unpack("!q", _read_exactly(stream, 8))[0]


def _read_exactly(stream, size: int) -> bytes:
    chunks = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _readable(stream, timeout: float) -> bool:
    return bool(select.select([stream], [], [], timeout)[0])


class _StepLimitReached(BaseException):
    """Raised inside the child to stop a script at a bound: its ``args[0]`` says which."""


class _GraphWalks:
    """In a run's child, the graphs that backward and ``autograd.grad`` calls walk: the last
    ``recent`` calls that freed theirs are kept (root nodes, and the user's frames that made the
    call) to tell which one freed the graph a later call finds freed; the leaves the first
    ``TRACED_WALKS`` calls reach are noted in the result, by labels another program shares."""

    def __init__(self, torch: Any, result: RunResult, recent: int) -> None:
        self.torch, self.result = torch, result
        self.recent: collections.deque = collections.deque(maxlen=recent)
        self.optimizers: list[Any] = []  # every optimizer built, in order
        self.traced = 0
        self.freed: set = set()  # the nodes of the failing call's graph an earlier call freed
        self.reading: set = set()  # the nodes of the failing call's graph that take only freed ones' outputs
        self.freeing_reading: set = set()  # the nodes of a freeing call's graph that take shared ones' outputs

    def register_optimizers(self) -> None:
        """Note every optimizer the script builds: its parameters are labelled by its rank."""
        optimizers, original_init = self.optimizers, self.torch.optim.Optimizer.__init__

        def init(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            original_init(optimizer, *args, **kwargs)
            optimizers.append(optimizer)

        self.torch.optim.Optimizer.__init__ = init

    def rank(self, optimizer: Any) -> int:
        """The optimizer's rank among those built so far; -1 for one built before the script ran."""
        return next((rank for rank, built in enumerate(self.optimizers) if built is optimizer), -1)

    def walked(self, roots: tuple, frames: list[Frame], frees: bool) -> None:
        if frees and self.recent.maxlen:
            self.recent.append((roots, frames))
        if self.traced < TRACED_WALKS:
            self.traced += 1
            self._reached(_graph_nodes(roots), backward_site(frames))

    def freeing(self, roots: tuple, frames: list[Frame]) -> list[Frame]:
        """The frames of the latest call that freed part of the graph of ``roots`` (a call that
        failed, from ``frames``): the one whose graph shares a node with it, leaves aside (every
        graph of a model reaches its parameters). The nodes it shares with every such earlier call
        are ``freed``; the nodes of theirs that read those are ``freeing_reading``."""
        nodes = _graph_nodes(roots)
        self._reached(nodes, backward_site(frames))
        inner = {node for node in nodes if not hasattr(node, "variable")}
        freeing: list[Frame] = []
        for earlier_roots, earlier_frames in reversed(self.recent):
            earlier = _graph_nodes(earlier_roots)
            shared = inner & earlier
            if shared:
                self.freed |= shared  # earlier calls may each have freed a part
                freeing = freeing or earlier_frames
                self.freeing_reading |= {node for node in earlier - inner if any(following in shared for following, _ in node.next_functions)}
        if not freeing:
            self.freed = inner
            return []
        # Where the failing graph reads only freed values (or leaves): cutting what such a node
        # computes cuts the freed graph and nothing still whole.
        self.reading = {
            node
            for node in inner - self.freed
            if all(following is None or following in self.freed or hasattr(following, "variable") for following, _ in node.next_functions)
            and any(following in self.freed for following, _ in node.next_functions)
        }
        return freeing

    def _reached(self, nodes: set, site: str) -> None:
        leaves = [node.variable for node in nodes if hasattr(node, "variable")]
        if not leaves:
            return
        labels, names = self._labels()
        reached_here = self.result.reached_by_backward.setdefault(site, set())
        for leaf in leaves:
            if id(leaf) in labels:
                self.result.reached_leaves.add(labels[id(leaf)])
                reached_here.add(labels[id(leaf)])
                if id(leaf) in names:
                    self.result.leaf_names[labels[id(leaf)]] = names[id(leaf)]

    def _labels(self) -> tuple[dict[int, str], dict[int, str]]:
        """Labels of the leaves a run can name: an optimizer's parameters by the optimizer's rank
        and their place in it, other leaves by the global names that reach them; and those names,
        which the user knows."""
        labels: dict[int, str] = {}
        for rank, optimizer in enumerate(self.optimizers):
            for group_index, group in enumerate(optimizer.param_groups):
                for index, parameter in enumerate(group["params"]):
                    labels.setdefault(id(parameter), f"optimizer {rank} parameter {group_index}.{index}")
        main = sys.modules.get("__main__")
        names = {id(tensor): name for name, tensor in _named_leaves(vars(main) if main is not None else {})}
        for leaf, name in names.items():
            labels.setdefault(leaf, name)
        return labels, names


def backward_site(frames: list[Frame]) -> str:
    """A backward call as another program that holds the same code names it: the innermost line
    of the user's code that made it (a rewrite moves lines, not what they say), with its module."""
    if not frames:
        return "code gradfix did not see"
    innermost = frames[-1]
    return f"`{innermost.code}`" + (f" in {os.path.basename(innermost.path)}" if innermost.path else "")


def _walk_of(function: Any, args: tuple, kwargs: dict) -> tuple[tuple, bool]:
    """The root nodes of the graph a call of ``function`` (``torch.autograd.backward`` or
    ``grad``) walks, and whether it frees that graph."""
    import torch

    try:
        arguments = _signature(function).bind(*args, **kwargs).arguments
    except TypeError:
        return (), False  # the call itself says what is wrong
    outputs = arguments.get("tensors", arguments.get("outputs"))
    outputs = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs or ())
    retain_graph = arguments.get("retain_graph")
    frees = not (arguments.get("create_graph", False) if retain_graph is None else retain_graph)
    return tuple(t.grad_fn for t in outputs if isinstance(t, torch.Tensor) and t.grad_fn is not None), frees


@lru_cache(maxsize=None)
def _signature(function: Any) -> inspect.Signature:
    return inspect.signature(function)


def _graph_nodes(roots: tuple) -> set:
    """The autograd nodes reachable from ``roots``; a freed graph keeps its structure."""
    seen: set = set()
    pending = list(roots)
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        pending.extend(following for following, _ in node.next_functions if following is not None)
    return seen


HELD_GRAPHS_KEPT = 200  # values noted that held the freed graph; more say nothing new


def _held_graphs(tb: Any, script: str, freed: set) -> tuple[list[HeldGraph], set]:
    """The values the user's frames of the failing stack reach (their variables, the attributes of
    their objects and modules, submodules included) that hold part of the ``freed`` nodes, and the
    nodes that made the tensors among them."""
    import torch

    graphs = _GraphReach(freed)
    held: list[HeldGraph] = []
    roots: set = set()
    for frame, _ in traceback.walk_tb(tb):
        code = frame.f_code
        if not _in_user_code(code.co_filename, script):
            continue
        path = "" if code.co_filename == script else code.co_filename
        function_line = 0 if code.co_name == "<module>" else code.co_firstlineno
        for name, value in list(frame.f_locals.items()):
            if name.startswith("__") or isinstance(value, (types.ModuleType, type)) or callable(value) and not isinstance(value, torch.nn.Module):
                continue
            for expression, owner, reached in _attributes_of(name, value, torch):
                structure = graphs.structure(reached, torch)
                if structure is not None:
                    only_freed = isinstance(reached, torch.Tensor) and graphs.only_freed(reached)
                    held.append(HeldGraph(path, function_line, expression, *structure, owner=owner, only_freed=only_freed))
                    if isinstance(reached, torch.Tensor):
                        roots.add(reached.grad_fn)
                    if len(held) >= HELD_GRAPHS_KEPT:
                        return held, roots
    return held, roots


def _attributes_of(name: str, value: Any, torch: Any) -> list[tuple[str, str, Any]]:
    """``value`` as ``name``, and what code reaches from it: the attributes and buffers of a module
    and of its submodules, the attributes of an object of the user's own class."""
    reached = [(name, "", value)]
    if isinstance(value, torch.nn.Module):
        for module_path, module in value.named_modules():
            expression = name + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in module_path.split(".") if part)
            if module_path and not all(part.isdigit() or part.isidentifier() for part in module_path.split(".")):
                continue
            owner = type(module).__name__
            attributes = {**module._buffers, **{k: v for k, v in vars(module).items() if not k.startswith("__") and k not in _MODULE_INTERNALS}}
            reached += [(f"{expression}.{attribute}", owner, item) for attribute, item in attributes.items() if item is not None]
    elif hasattr(value, "__dict__") and not isinstance(value, torch.Tensor) and type(value).__module__ == "__main__":
        reached += [(f"{name}.{attribute}", type(value).__name__, item) for attribute, item in vars(value).items() if not attribute.startswith("__")]
    return reached


_MODULE_INTERNALS = frozenset({"_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"})


class _GraphReach:
    """Whether values hold part of a set of graph nodes, each node explored once."""

    def __init__(self, freed: set) -> None:
        self.freed = freed
        self.clean: set = set()  # nodes from which no freed node is reachable

    def holds(self, tensor: Any) -> bool:
        pending, seen = [tensor.grad_fn], set()
        while pending:
            node = pending.pop()
            if node is None or node in seen or node in self.clean:
                continue
            if node in self.freed:
                return True
            seen.add(node)
            pending.extend(following for following, _ in node.next_functions)
        self.clean |= seen
        return False

    def only_freed(self, tensor: Any) -> bool:
        """Whether every node of ``tensor``'s graph but its leaves was freed."""
        return all(node in self.freed or hasattr(node, "variable") for node in _graph_nodes((tensor.grad_fn,)))

    def structure(self, value: Any, torch: Any) -> tuple[str, bool] | None:
        """How ``value`` holds freed nodes, and whether all its parts are tensors; None if it does not."""
        if isinstance(value, torch.Tensor):
            return ("tensor", True) if value.grad_fn is not None and self.holds(value) else None
        if isinstance(value, (tuple, list, dict)):
            parts = list(value.values()) if isinstance(value, dict) else list(value)
            if not any(self._holds_within(part, torch) for part in parts):
                return None
            kind = "namedtuple" if hasattr(type(value), "_fields") else type(value).__name__ if type(value) in (tuple, list, dict) else ""
            return (kind, all(isinstance(part, torch.Tensor) for part in parts)) if kind else None
        if callable(getattr(value, "detach", None)) and hasattr(value, "__dict__"):
            if any(self._holds_within(item, torch) for item in vars(value).values()):
                return ("detachable", False)
        return None

    def _holds_within(self, value: Any, torch: Any, depth: int = 3) -> bool:
        if isinstance(value, torch.Tensor):
            return value.grad_fn is not None and self.holds(value)
        if depth and isinstance(value, (tuple, list)):
            return any(self._holds_within(part, torch, depth - 1) for part in value)
        if depth and isinstance(value, dict):
            return any(self._holds_within(part, torch, depth - 1) for part in value.values())
        return False


def _in_user_code(path: str, script: str) -> bool:
    """Whether ``path`` is the user's code: the script, or a module or package beside it (not an
    environment installed there)."""
    if path == script:
        return True
    folder = os.path.dirname(script) + os.sep
    return path.startswith(folder) and path.endswith(".py") and not {"site-packages", "dist-packages"} & set(path.split(os.sep))


def _child_main(request: _Request, workdir: str, result_path: str) -> None:
    script, options = request.script, request.options
    stdout_file = tempfile.TemporaryFile()
    stderr_file = tempfile.TemporaryFile()
    os.dup2(stdout_file.fileno(), 1)
    os.dup2(stderr_file.fileno(), 2)
    _limit_resources(options)
    os.chdir(workdir)
    os.environ.update(dict(request.passed_env))
    os.environ.update(dict(options.env))
    sys.argv = [script, *options.args]
    sys.path.insert(0, os.path.dirname(script))

    import warnings

    import torch

    if options.threads:
        torch.set_num_threads(options.threads)
    result = RunResult("ok")
    anomaly_reports: list[str] = []
    started = time.monotonic()

    def user_frames(frames) -> list[Frame]:
        return [
            Frame(f.lineno, (f.line or "").strip(), "" if f.filename == script else f.filename) for f in frames if _in_user_code(f.filename, script)
        ]

    def stop_at_time_bound() -> None:
        if options.stop_after is not None and time.monotonic() - started > options.stop_after:
            raise _StepLimitReached("time")

    from torch.optim.optimizer import register_optimizer_step_post_hook

    walks = _GraphWalks(torch, result, recent=RECENT_WALKS if options.detect_anomaly else 0)
    trace_walks = options.detect_anomaly or options.record_gradients
    original_backward, original_grad = torch.autograd.backward, torch.autograd.grad
    first_versions: dict[str, int] = {}

    def walked(original, args: tuple, kwargs: dict):
        """Call ``original`` (backward or grad), noting the graph it walked and whether it freed it."""
        if not trace_walks:
            return original(*args, **kwargs)
        frames = user_frames(traceback.extract_stack()[:-2])
        roots, frees = _walk_of(original, args, kwargs)
        try:
            returned = original(*args, **kwargs)
        except RuntimeError as error:
            if options.detect_anomaly and "backward through the graph a second time" in str(error):
                result.freeing_frames = walks.freeing(roots, frames)
            raise
        walks.walked(roots, frames, frees)
        return returned

    def backward(*args: Any, **kwargs: Any):
        caller = user_frames(traceback.extract_stack()[:-1])
        if caller:
            place = (caller[-1].path, caller[-1].line)
            result.backward_calls_by_line[place] = result.backward_calls_by_line.get(place, 0) + 1
        stop_at_time_bound()
        if options.retain_graph:
            kwargs["retain_graph"] = True
            args = args[:2]  # retain_graph, when given positionally, is the third argument
        returned = walked(original_backward, args, kwargs)
        recording = options.recorded_steps is None or result.backward_calls < options.recorded_steps
        if options.record_gradients and recording and not result.gradients:  # no optimizer has stepped
            _record_named_gradients(result, first_versions)
        result.backward_calls += 1
        if options.max_steps is not None and result.backward_calls >= options.max_steps:
            raise _StepLimitReached("backward calls")
        return returned

    def grad(*args: Any, **kwargs: Any):
        if options.retain_graph:
            kwargs["retain_graph"] = True
            args = args[:3]  # retain_graph, when given positionally, is the fourth argument
        return walked(original_grad, args, kwargs)

    def stepped(*_: Any) -> None:
        if options.detect_anomaly and result.optimizer_steps < TRACED_WALKS:
            result.step_frames += [f for f in user_frames(traceback.extract_stack()[:-1]) if f not in result.step_frames]
        result.optimizer_steps += 1
        if options.max_optimizer_steps is not None and result.optimizer_steps >= options.max_optimizer_steps:
            raise _StepLimitReached("optimizer steps")
        stop_at_time_bound()

    register_optimizer_step_post_hook(stepped)
    if trace_walks:
        walks.register_optimizers()
    torch.autograd.backward = backward
    torch.autograd.grad = grad
    if options.record_gradients:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        def record_step(optimizer: Any, args: tuple, kwargs: dict, after: bool = False) -> None:
            # A closure (LBFGS) computes the gradients inside the step: they are there after it.
            closure = bool(args) or kwargs.get("closure") is not None
            if closure == after and (options.recorded_steps is None or result.optimizer_steps < options.recorded_steps):
                result.gradients.extend(_optimizer_gradients(optimizer, walks.rank(optimizer)))

        register_optimizer_step_pre_hook(record_step)
        register_optimizer_step_post_hook(lambda optimizer, args, kwargs: record_step(optimizer, args, kwargs, after=True))
    if options.measure_graphs:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        def measure(*_: Any) -> None:
            if len(result.live_graph_nodes) < MEASURED_STEPS:
                result.live_graph_nodes.append(_live_graph_nodes(torch))

        register_optimizer_step_pre_hook(measure)
    if options.count_lines:
        _count_lines(script, set(options.count_lines), result.line_counts)
    if options.detect_anomaly:
        torch.autograd.set_detect_anomaly(True, check_nan=False)  # (its traces, not a NaN check the program never asked for)
        warnings.showwarning = lambda message, *rest: anomaly_reports.append(str(message))

    run_process = os.getpid()

    def record() -> None:
        if os.getpid() != run_process:  # a fork of the script (a data loader's worker) is not the run
            return
        result.seconds = time.monotonic() - started
        sys.stdout.flush()
        sys.stderr.flush()
        result.stdout = _read(stdout_file)
        result.stderr = _read(stderr_file)
        with open(result_path, "wb") as handle:
            handle.write(typed_json.dumps(result, RunResult))

    leave_now = os._exit

    def exit_recorded(code: int = 0) -> None:
        """``os._exit`` skips every cleanup: record what the run showed before leaving."""
        if code != 0:
            result.status, result.error_type, result.error_message = "error", "SystemExit", f"os._exit({code})"
        record()
        leave_now(code)

    os._exit = exit_recorded
    try:
        namespace = _run_as_main(script, {os.path.realpath(path): source for path, source in options.sources})
        if options.record_gradients and options.recorded_steps is None:
            result.gradients += _final_state(namespace)
    except _StepLimitReached as bound:
        result.status, result.stopped_by = "stopped", bound.args[0]
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            result.status, result.error_type, result.error_message = "error", "SystemExit", str(exit_.code)
    except BaseException as error:  # the script's own failure is the result
        result.status = "error"
        result.error_type = type(error).__name__
        result.error_message = str(error)
        result.traceback = "".join(traceback.format_exception(type(error), error, _from_script(error.__traceback__, script)))
        result.failing_frames = user_frames(traceback.extract_tb(error.__traceback__))
        # A script that ignores warnings hides anomaly mode's report: the freed nodes keep its trace.
        result.forward_frames = _forward_frames(anomaly_reports, script) or _traced_forward_frames(walks.freed, script)
        if walks.freed:
            result.held_graphs, held_roots = _held_graphs(error.__traceback__, script, walks.freed)
            result.reading_frames = _reading_frames(walks.reading & held_roots, script)
            result.freeing_reading_frames = _reading_frames(walks.freeing_reading, script, innermost=True)
    finally:
        os._exit = leave_now
    record()


def _limit_resources(options: RunOptions) -> None:
    """Memory as asked; CPU time a little over what the run's threads could use before its
    timeout (a backstop: the server kills the run at its timeout, or when gradfix dies); processes
    and threads ``PROCESS_HEADROOM`` over what the user already runs (the kernel exempts root)."""
    if options.memory_limit is not None:
        _lower_limit(resource.RLIMIT_AS, _mapped_bytes() + options.memory_limit)
    _lower_limit(resource.RLIMIT_CPU, math.ceil(options.timeout * len(os.sched_getaffinity(0))) + 1)
    _lower_limit(resource.RLIMIT_NPROC, _tasks_of_user() + PROCESS_HEADROOM)


def _lower_limit(kind: int, value: int) -> None:
    """Set ``kind`` to ``value``, soft and hard, unless a lower limit is already set."""
    value = min([value] + [limit for limit in resource.getrlimit(kind) if limit != resource.RLIM_INFINITY])
    resource.setrlimit(kind, (value, value))


def _tasks_of_user() -> int:
    """About the processes and threads of this user, which ``RLIMIT_NPROC`` counts (a process
    that is not dumpable looks like root's and is left out)."""
    uid, tasks = os.getuid(), 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):  # it ended meanwhile
                if os.stat(f"/proc/{name}").st_uid == uid:
                    tasks += len(os.listdir(f"/proc/{name}/task"))
    return tasks


def _run_as_main(script: str, sources: dict[str, bytes]) -> dict[str, Any]:
    """Run ``script`` as ``python script`` does, and return its globals; a file named in
    ``sources`` (the script, a module it imports) runs from the bytes given, not from the disk."""
    for path, source in sources.items():  # tracebacks and inspect show the code that ran
        linecache.cache[path] = (len(source), None, importlib.util.decode_source(source).splitlines(True), path)
    modules = {path: source for path, source in sources.items() if path != script}
    if modules:
        sys.meta_path.insert(0, _ModulesFromMemory(modules))
    if script in sources:
        source = sources[script]
    else:
        with open(script, "rb") as handle:
            source = handle.read()
    main = types.ModuleType("__main__")
    main.__file__, main.__cached__ = script, None
    sys.modules["__main__"] = main
    exec(compile(source, script, "exec", dont_inherit=True), vars(main))
    return vars(main)


class _ModulesFromMemory(importlib.abc.MetaPathFinder):
    """Imports the modules whose files are in ``sources`` from the bytes given there."""

    def __init__(self, sources: dict[str, bytes]) -> None:
        self.sources = sources

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        source = self.sources.get(os.path.realpath(spec.origin)) if spec is not None and spec.has_location else None
        if source is None:
            return None
        spec.loader = _LoaderFromMemory(name, spec.origin, source)
        return spec


class _LoaderFromMemory(importlib.machinery.SourceFileLoader):
    def __init__(self, name: str, path: str, source: bytes) -> None:
        super().__init__(name, path)
        self.source = source

    def get_data(self, path: str) -> bytes:
        return self.source if path == self.path else super().get_data(path)

    def path_stats(self, path: str) -> dict[str, Any]:
        raise OSError("no bytecode: the file on disk is not what runs")


def _from_script(frames, script: str):
    """The traceback from the script's first frame on: the runner's own frames are not the user's."""
    first = frames
    while first is not None and first.tb_frame.f_code.co_filename != script:
        first = first.tb_next
    return first or frames


def _count_lines(script: str, lines: set[int], counts: dict[int, int]) -> None:
    """Count executions of ``lines`` of the script; other files' frames are not traced."""

    def in_script(frame, event, _):
        if event == "line" and frame.f_lineno in lines:
            counts[frame.f_lineno] = counts.get(frame.f_lineno, 0) + 1
        return in_script

    def calls(frame, event, _):
        return in_script if frame.f_code.co_filename == script else None

    sys.settrace(calls)


def _live_graph_nodes(torch) -> int:
    """Autograd graph nodes still reachable from live tensors: the memory a program keeps from
    step to step (a running ``total += loss`` holds one tensor but a graph that grows)."""
    import gc

    pending = [o.grad_fn for o in gc.get_objects() if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    seen = set()
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        pending.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)


def _mapped_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * resource.getpagesize()


def _read(handle) -> str:
    """What the script wrote: all of it up to ``OUTPUT_KEPT`` bytes, else the head and the tail."""
    size = handle.seek(0, os.SEEK_END)
    handle.seek(0)
    if size <= OUTPUT_KEPT:
        return handle.read().decode("utf-8", "replace")
    head = handle.read(OUTPUT_KEPT // 2)
    handle.seek(size - OUTPUT_KEPT // 2)
    tail = handle.read()
    left_out = f"\n[… {size - len(head) - len(tail)} bytes of output left out …]\n"
    return head.decode("utf-8", "replace") + left_out + tail.decode("utf-8", "replace")


def _forward_frames(reports: list[str], script: str) -> list[Frame]:
    """The lines of the user's code (the script, the modules and packages beside it) in anomaly
    mode's "Traceback of forward call that caused the error"."""
    frames = []
    for report in reports:
        if "forward call that caused the error" not in report:
            continue
        lines = report.splitlines()
        for index, line in enumerate(lines):
            found = _FRAME_LINE.match(line.strip())
            if found and _in_user_code(found["file"], script):
                code = lines[index + 1].strip() if index + 1 < len(lines) else ""
                frames.append(Frame(int(found["line"]), code, "" if found["file"] == script else found["file"]))
    return frames


def _traced_forward_frames(freed: set, script: str) -> list[Frame]:
    """The user's lines in the forward trace anomaly mode keeps on the freed node that backward
    meets first (the latest made of those that saved tensors)."""
    saving = [node for node in freed if any(name.startswith("_saved_") for name in dir(node))]
    return _traced_frames(max(saving, key=lambda node: node._sequence_nr()), script) if saving else []


def _reading_frames(reading: set, script: str, innermost: bool = False) -> list[Frame]:
    """The user's lines that made one graph read another: the forward trace of each node of
    ``reading`` (of the failing graph, its inputs all freed; or of a freeing one, reading what the
    failing graph shares), or only its innermost line."""
    frames: list[Frame] = []
    for node in sorted(reading, key=lambda node: -node._sequence_nr()):
        traced = _traced_frames(node, script)
        frames += [frame for frame in (traced[-1:] if innermost else traced) if frame not in frames]
    return frames


def _traced_frames(node: Any, script: str) -> list[Frame]:
    """The user's lines in the forward trace anomaly mode keeps on ``node``."""
    trace = node.metadata.get("traceback_", [])
    frames = []
    for entry in trace:
        found = _FRAME_LINE.search(entry)
        if found and _in_user_code(found["file"], script):
            code = entry.splitlines()[1].strip() if len(entry.splitlines()) > 1 else ""
            frames.append(Frame(int(found["line"]), code, "" if found["file"] == script else found["file"]))
    return frames


_FRAME_LINE = re.compile(r'File "(?P<file>[^"]+\.py)", line (?P<line>\d+)')


def _optimizer_gradients(optimizer, rank: int) -> list[tuple[str, list[float]]]:
    """The gradients an optimizer steps with, labelled as ``_GraphWalks`` labels its parameters."""
    step = []
    for group_index, group in enumerate(optimizer.param_groups):
        for index, parameter in enumerate(group["params"]):
            grad = parameter.grad
            label = f"optimizer {rank} parameter {group_index}.{index}"
            step.append((label, [] if grad is None else grad.detach().flatten().tolist()))
    return step


def _final_state(namespace: dict) -> list[tuple[str, list[float]]]:
    """Values and gradients of the parameters reachable from the script's globals."""
    state = []
    for label, tensor in _named_leaves(namespace):
        state.append((f"{label} value", tensor.detach().flatten().tolist()))
        if tensor.grad is not None:
            state.append((f"{label} grad", tensor.grad.detach().flatten().tolist()))
    return state


def _record_named_gradients(result: RunResult, first_versions: dict[str, int]) -> None:
    """The gradients the named leaves hold after a backward; a leaf whose version moved since it
    was first seen was updated in place (by hand or by an optimizer)."""
    main = sys.modules.get("__main__")  # runpy's module of the running script
    for label, tensor in _named_leaves(vars(main) if main is not None else {}):
        version = first_versions.setdefault(label, tensor._version)
        if tensor._version != version:
            result.updated_leaves.add(label)
        if tensor.grad is not None:
            result.backward_gradients.append((f"backward {result.backward_calls + 1}: {label}", tensor.grad.detach().flatten().tolist()))


def _named_leaves(namespace: dict) -> list[tuple[str, Any]]:
    """The tensors that take gradients named by ``namespace``: its leaf tensors, and its modules'
    parameters, each labelled by the name that reaches it."""
    import torch

    leaves = []
    for name, value in sorted(namespace.items(), key=lambda item: item[0]):
        if isinstance(value, torch.nn.Module):
            leaves += [(f"{name}.{p}", t) for p, t in value.named_parameters()]
        elif isinstance(value, torch.Tensor) and value.requires_grad and value.is_leaf:
            leaves.append((name, value))
    return leaves
