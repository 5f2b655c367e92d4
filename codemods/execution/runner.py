"""Running Python scripts in isolated children: the only place gradfix executes code.

Importing torch costs seconds, so scripts do not start from a fresh interpreter: a fork server
process imports torch once (and runs no torch op, so forking it is safe), and each script runs in
a child forked from it, with its own working
directory, environment, time limit and memory limit, its output captured. A child that hangs is
killed; one that crashes is reported; neither can take the caller down.

Inside the child, ``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped to count
backward calls per line, to stop the script cleanly after a number of successful steps, and, on
request, to force ``retain_graph=True``. Gradients seen at every optimizer step and the final
parameters can be recorded for comparing two programs.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pickle
import re
import resource
import select
import signal
import struct
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRELOADED_FRAMEWORKS = ("accelerate", "pytorch_lightning", "lightning_fabric", "transformers")
MEASURED_STEPS = 8  # a scan of the heap costs a quarter of a second; growth shows in a few steps


@dataclass(frozen=True)
class RunOptions:
    args: tuple[str, ...] = ()
    timeout: float = 60.0
    memory_limit: int | None = 4 << 30  # bytes of address space on top of what torch has mapped
    max_steps: int | None = None  # stop after this many successful backward calls
    retain_graph: bool = False  # force retain_graph=True on every backward
    record_gradients: bool = False
    measure_graphs: bool = False  # count the graph nodes live tensors hold, at every optimizer step
    detect_anomaly: bool = False
    count_lines: tuple[int, ...] = ()  # lines of the script whose executions are counted
    cwd: str | None = None  # default: a fresh, empty temporary folder
    env: tuple[tuple[str, str], ...] = ()
    pass_env: tuple[str, ...] = ()  # variables kept although their names look like secrets
    overlay: str | None = None  # a folder whose modules shadow the script folder's (a rewritten sibling)
    threads: int | None = None  # torch's intra-op threads (runs side by side must not oversubscribe)


@dataclass
class Frame:
    line: int
    code: str
    path: str = ""  # the file, when it is a module beside the script rather than the script


@dataclass
class RunResult:
    status: str  # "ok", "error", "stopped" (step limit reached), "timeout", "crashed"
    error_type: str = ""
    error_message: str = ""
    traceback: str = ""
    stdout: str = ""
    stderr: str = ""
    backward_calls: int = 0  # successful ones
    backward_calls_by_line: dict[int, int] = field(default_factory=dict)  # all calls from the script
    failing_frames: list[Frame] = field(default_factory=list)  # script frames of the error, outermost first
    forward_frames: list[Frame] = field(default_factory=list)  # anomaly mode: where the failing node was made
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
            "stopped": f"stopped after {self.backward_calls} backward call(s)",
            "timeout": "did not finish in time (killed)",
            "crashed": "crashed: " + self.error_message,
        }[self.status]


class ScriptRunner:
    """Runs scripts in children forked from one warm server process that has imported torch.

    Use as a context manager, or call ``close()``; the server starts on the first run."""

    def __init__(self) -> None:
        self._server: subprocess.Popen | _TwinServer | None = None

    def __enter__(self) -> "ScriptRunner":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        if self._server is not None:
            self._server.stdin.close()
            self._server.wait(10)
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
            _send(server.stdin, (_TWIN, requests, replies))
            pid = _receive(server.stdout)
            # Opened in the order the twin opens them, each open waiting for the other end.
            twin._server = _TwinServer(open(requests, "wb", buffering=0), open(replies, "rb", buffering=0), pid)
        return twin

    def _started_server(self) -> subprocess.Popen | _TwinServer:
        if self._server is None or self._server.poll() is not None:
            self._server = subprocess.Popen(
                [sys.executable, "-c", "from gradfix.codemods.execution.runner import serve; serve()"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
            )
        return self._server

    def run(self, script: str | Path, options: RunOptions = RunOptions()) -> RunResult:
        server = self._started_server()
        with tempfile.TemporaryDirectory(prefix="gradfix-run-") as scratch:
            result_path = os.path.join(scratch, "result.pickle")
            workdir = options.cwd or os.path.join(scratch, "cwd")
            os.makedirs(workdir, exist_ok=True)
            try:
                _send(server.stdin, (str(Path(script).resolve()), options, workdir, result_path))
                pid = _receive(server.stdout)
            except (EOFError, BrokenPipeError):
                self._server = None  # the next run starts a new one
                return RunResult("crashed", error_message="gradfix's runner process died (out of memory, or killed)")
            try:
                timed_out = not _readable(server.stdout, options.timeout)
            except BaseException:  # Ctrl-C, SIGTERM: the script goes with gradfix
                _kill_group(pid)
                raise
            if timed_out:
                _kill_group(pid)
            try:
                status = _receive(server.stdout)
            except EOFError:
                _kill_group(pid)
                self._server = None
                return RunResult("crashed", error_message="gradfix's runner process died while the script ran")
            if timed_out:
                return RunResult("timeout")
            if os.path.exists(result_path):
                with open(result_path, "rb") as handle:
                    return pickle.load(handle)
            if os.WIFSIGNALED(status):
                return RunResult("crashed", error_message=f"killed by signal {os.WTERMSIG(status)}")
            return RunResult("crashed", error_message=f"exit code {os.waitstatus_to_exitcode(status)}")


def serve() -> None:
    """The fork server: import torch once, then fork a child for every request on stdin."""
    # Ctrl-C reaches the whole terminal process group: gradfix decides what stops, not the server.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDWR)
    for descriptor in (0, 1):
        os.dup2(null, descriptor)  # stray output must not corrupt the protocol

    # The point of this process: children start with torch imported. Building an optimizer
    # imports torch._dynamo lazily, which costs more than torch itself.
    import torch._dynamo  # noqa: F401
    import torch.nn  # noqa: F401
    import torch.optim  # noqa: F401

    _serve(requests, replies)


def _serve(requests, replies) -> None:
    while True:
        try:
            request = _receive(requests)
        except EOFError:
            return
        if request[0] == _TWIN:
            _send(replies, _forked_twin(*request[1:]))
            continue
        _import_frameworks_of(request[0])
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()  # its own session and process group: whatever it spawns dies with it
                signal.signal(signal.SIGINT, signal.default_int_handler)
                requests.close()
                replies.close()
                _child_main(*request)
            finally:
                os._exit(0)
        _send(replies, pid)
        _, status = os.waitpid(pid, 0)
        _kill_group(pid)  # what the script left running in the background
        _send(replies, status)


OUTPUT_KEPT = 1 << 20  # bytes of a script's stdout, and of its stderr, a result keeps
_TWIN = "\0twin"  # a request for a forked copy of the server; no script path starts with NUL


class _TwinServer:
    """The end of a forked server's pipes, with the calls ``ScriptRunner`` makes of a ``Popen``."""

    def __init__(self, stdin, stdout, pid: int) -> None:
        self.stdin, self.stdout, self.pid = stdin, stdout, pid

    def poll(self) -> int | None:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return 0
        return None

    def wait(self, timeout: float) -> None:
        """Nothing to wait for: with its requests closed the twin leaves at once, and the server
        it was forked from reaps it when that one is closed."""
        self.stdout.close()


def _forked_twin(requests_path: str, replies_path: str) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            requests = open(requests_path, "rb", buffering=0)
            replies = open(replies_path, "wb", buffering=0)
            _serve(requests, replies)
        finally:
            os._exit(0)
    return pid


def _import_frameworks_of(script: str) -> None:
    """Training frameworks cost seconds to import: import the ones a script imports into the
    server, once, so that this run and every later one forks with them loaded. A script that needs
    none (most) starts without paying for them."""
    try:
        source = Path(script).read_text(errors="replace")
    except OSError:
        return
    for framework in PRELOADED_FRAMEWORKS:
        if framework not in sys.modules and re.search(rf"^\s*(?:import|from)\s+{framework}\b", source, re.MULTILINE):
            with contextlib.suppress(ImportError):
                importlib.import_module(framework)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _send(stream, value: Any) -> None:
    data = pickle.dumps(value)
    stream.write(struct.pack("!Q", len(data)) + data)
    stream.flush()


def _receive(stream) -> Any:
    header = _read_exactly(stream, 8)
    return pickle.loads(_read_exactly(stream, struct.unpack("!Q", header)[0]))


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
    """Raised inside the child to stop a script after enough training steps."""


def _child_main(script: str, options: RunOptions, workdir: str, result_path: str) -> None:
    stdout_file = tempfile.TemporaryFile()
    stderr_file = tempfile.TemporaryFile()
    os.dup2(stdout_file.fileno(), 1)
    os.dup2(stderr_file.fileno(), 2)
    if options.memory_limit is not None:
        mapped = _mapped_bytes()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + options.memory_limit, mapped + options.memory_limit))
    os.chdir(workdir)
    for name in [n for n in os.environ if _looks_secret(n) and n not in options.pass_env]:
        del os.environ[name]
    os.environ.update(dict(options.env))
    sys.argv = [script, *options.args]
    sys.path.insert(0, os.path.dirname(script))
    if options.overlay:
        sys.path.insert(0, options.overlay)

    import runpy
    import warnings

    import torch

    if options.threads:
        torch.set_num_threads(options.threads)
    result = RunResult("ok")
    anomaly_reports: list[str] = []

    def script_frames(frames) -> list[Frame]:
        return [Frame(f.lineno, (f.line or "").strip()) for f in frames if f.filename == script]

    original_backward = torch.autograd.backward
    first_versions: dict[str, int] = {}

    def backward(*args: Any, **kwargs: Any):
        caller = script_frames(traceback.extract_stack()[:-1])
        if caller:
            line = caller[-1].line
            result.backward_calls_by_line[line] = result.backward_calls_by_line.get(line, 0) + 1
        if options.retain_graph:
            kwargs["retain_graph"] = True
            args = args[:2]  # retain_graph, when given positionally, is the third argument
        returned = original_backward(*args, **kwargs)
        if options.record_gradients and not result.gradients:  # no optimizer has stepped
            _record_named_gradients(result, first_versions)
        result.backward_calls += 1
        if options.max_steps is not None and result.backward_calls >= options.max_steps:
            raise _StepLimitReached
        return returned

    torch.autograd.backward = backward
    if options.record_gradients:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(
            lambda optimizer, args, kwargs: result.gradients.extend(_optimizer_gradients(optimizer))
        )
    if options.measure_graphs:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        def measure(*_: Any) -> None:
            if len(result.live_graph_nodes) < MEASURED_STEPS:
                result.live_graph_nodes.append(_live_graph_nodes(torch))

        register_optimizer_step_pre_hook(measure)
    if options.count_lines:
        _count_lines(script, set(options.count_lines), result.line_counts)
    if options.detect_anomaly:
        torch.autograd.set_detect_anomaly(True)
        warnings.showwarning = lambda message, *rest: anomaly_reports.append(str(message))

    def record() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        result.stdout = _read(stdout_file)
        result.stderr = _read(stderr_file)
        with open(result_path, "wb") as handle:
            pickle.dump(result, handle)

    leave_now = os._exit

    def exit_recorded(code: int = 0) -> None:
        """``os._exit`` skips every cleanup: record what the run showed before leaving."""
        if code != 0:
            result.status, result.error_type, result.error_message = "error", "SystemExit", f"os._exit({code})"
        record()
        leave_now(code)

    os._exit = exit_recorded
    try:
        namespace = runpy.run_path(script, run_name="__main__")
        if options.record_gradients:
            result.gradients += _final_state(namespace)
    except _StepLimitReached:
        result.status = "stopped"
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            result.status, result.error_type, result.error_message = "error", "SystemExit", str(exit_.code)
    except BaseException as error:  # the script's own failure is the result
        result.status = "error"
        result.error_type = type(error).__name__
        result.error_message = str(error)
        result.traceback = "".join(traceback.format_exception(type(error), error, _from_script(error.__traceback__, script)))
        result.failing_frames = script_frames(traceback.extract_tb(error.__traceback__))
        result.forward_frames = _forward_frames(anomaly_reports, script)
    finally:
        os._exit = leave_now
    record()


_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")


def _from_script(frames, script: str):
    """The traceback from the script's first frame on: the runner's own frames are not the user's."""
    first = frames
    while first is not None and first.tb_frame.f_code.co_filename != script:
        first = first.tb_next
    return first or frames


def _looks_secret(name: str) -> bool:
    """``GITHUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``PGPASSWORD``: the script never needs them to
    show a training bug, and it is somebody else's code."""
    return any(word in name.upper() for word in _SECRET_WORDS)


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
    """The lines of the script and of the modules beside it in anomaly mode's "Traceback of
    forward call that caused the error"."""
    folder = os.path.dirname(script)
    frames = []
    for report in reports:
        if "forward call that caused the error" not in report:
            continue
        lines = report.splitlines()
        for index, line in enumerate(lines):
            found = _FRAME_LINE.match(line.strip())
            if found and os.path.dirname(found["file"]) == folder:
                code = lines[index + 1].strip() if index + 1 < len(lines) else ""
                frames.append(Frame(int(found["line"]), code, "" if found["file"] == script else found["file"]))
    return frames


_FRAME_LINE = re.compile(r'File "(?P<file>[^"]+\.py)", line (?P<line>\d+)')


def _optimizer_gradients(optimizer) -> list[tuple[str, list[float]]]:
    step = []
    for group_index, group in enumerate(optimizer.param_groups):
        for index, parameter in enumerate(group["params"]):
            grad = parameter.grad
            label = f"step gradient {group_index}.{index}"
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
