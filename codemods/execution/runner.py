"""Running Python scripts in isolated children: what a run is (its options and its result), and
gradfix's side of it.

Importing torch costs seconds, so scripts do not start from a fresh interpreter: a fork server
process imports torch once (and runs no torch op, so forking it is safe), and each script runs in
a child forked from it, with its own working directory, environment, time, memory, CPU-time and
process limits, its output captured. A child that hangs is killed; one that crashes is reported;
neither can take the caller down. These are the only modules where gradfix executes code, one a
side of a run, each in its own process:

* ``runner.py`` (this one), in gradfix's process: the server started with the allowed environment,
  the runs asked of it, their results read back, a run that outlasts its timeout killed;
* ``fork_server.py``, in the server: a child forked for each run, and what the run left cleaned up;
* ``script_child.py``, in the child: the script run under the run's limits, its result written;
* ``recording.py``, in the child too: what the run records of the script's graphs and gradients.

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
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from .. import typed_json

if TYPE_CHECKING:
    import ctypes

MEASURED_STEPS = 8  # growth shows in a few steps (a scan walks only what the run made: script_child.py)
STOP_SHARE = 0.9  # of a run's time: a run still training then stops with what it showed; the rest kills one stuck elsewhere
COMPARED_STEPS = 8  # optimizer steps (backward calls without one) whose gradients a repair compares

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

    Use as a context manager, or call ``close()``; the server starts on the first run, or at ``start()``."""

    def __init__(self) -> None:
        self._server: subprocess.Popen | _TwinServer | None = None
        self._running: int | None = None  # the pid of the run in progress
        self._stopping = False  # stop() was called: a run in progress, or starting, is killed
        self._unasked = False  # the server started has been asked nothing yet: it ran no script

    def __enter__(self) -> "ScriptRunner":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        if self._server is not None:
            if self._unasked:  # nothing to clean up: not waited for through its import of torch
                self._server.kill()
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
        server = self._server_for_request()
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

    def start(self) -> None:
        """Start the server now, not at the first run: its import of torch (seconds) goes on while
        gradfix prepares that run."""
        self._started_server()

    def _server_for_request(self) -> subprocess.Popen | _TwinServer:
        """The server, started if need be, about to be asked something."""
        server = self._started_server()
        self._unasked = False
        return server

    def _started_server(self) -> subprocess.Popen | _TwinServer:
        if self._server is None or self._server.poll() is not None:
            # From now on no process of this user (a script) reads gradfix's environment, memory or
            # pipes through /proc.
            _prctl(PR_SET_DUMPABLE, 0)
            self._server = subprocess.Popen(
                # -P: nothing is imported from the folder gradfix runs in (the checked tree, often).
                [sys.executable, "-P", "-c", f"from gradfix.codemods.execution.fork_server import serve; serve({os.getpid()})"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
                env=script_environment(os.environ),
                # Out of gradfix's process group: a signal to that group (a cancelled CI job,
                # Ctrl-C) reaches gradfix alone, and the server outlives gradfix to clean up.
                start_new_session=True,
            )
            self._unasked = True
        return self._server

    def run(self, script: str | Path, options: RunOptions = RunOptions()) -> RunResult:
        server = self._server_for_request()
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


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _prctl(option: int, value: int) -> None:
    import ctypes  # here, not for every command that names a run's options (check does not run one)

    if _libc().prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


@lru_cache(maxsize=None)
def _libc() -> ctypes.CDLL:
    import ctypes

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


def _in_user_code(path: str, script: str) -> bool:
    """Whether ``path`` is the user's code: the script, or a module or package beside it (not an
    environment installed there)."""
    if path == script:
        return True
    folder = os.path.dirname(script) + os.sep
    return path.startswith(folder) and path.endswith(".py") and not {"site-packages", "dist-packages"} & set(path.split(os.sep))
