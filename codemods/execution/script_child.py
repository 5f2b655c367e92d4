"""A run's child, forked from the fork server: the script run as ``python script`` runs it, under
the run's limits (memory, CPU time, processes), its output captured, and its result written where
the server reads it back.

Inside the child, ``torch.autograd.backward`` (which ``Tensor.backward`` calls) is wrapped to count
backward calls per line, to stop the script cleanly after a number of successful steps, and, on
request, to force ``retain_graph=True``. A candidate rewrite runs from memory
(``RunOptions.sources``): the files named there run from the bytes given, and nothing is written
beside the script. What the wrappers record of graphs and gradients is ``recording.py``'s.

Apart from the server because everything here runs in the script's process, after the fork: the
script may do anything to it, so nothing leaves it but its result, JSON that gradfix checks against
its types when it reads it.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.abc
import importlib.machinery
import importlib.util
import linecache
import math
import os
import resource
import sys
import tempfile
import time
import traceback
import types
from typing import Any

from .. import typed_json
from .recording import (
    RECENT_WALKS,
    TRACED_WALKS,
    _final_state,
    _forward_frames,
    _GraphWalks,
    _held_graphs,
    _live_graph_nodes,
    _optimizer_gradients,
    module_buffers,
    _reading_frames,
    _record_named_gradients,
    _traced_forward_frames,
    _walk_of,
)
from .runner import MEASURED_STEPS, Frame, RunOptions, RunResult, _in_user_code, _Request

PROCESS_HEADROOM = 1024  # processes and threads a script may add to what its user already runs
OUTPUT_KEPT = 1 << 20  # bytes of a script's stdout, and of its stderr, a result keeps


class _StepLimitReached(BaseException):
    """Raised inside the child to stop a script at a bound: its ``args[0]`` says which."""


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
                main = sys.modules.get("__main__")  # (runpy's module of the running script)
                result.gradients.extend(module_buffers(vars(main) if main is not None else {}))

        register_optimizer_step_pre_hook(record_step)
        register_optimizer_step_post_hook(lambda optimizer, args, kwargs: record_step(optimizer, args, kwargs, after=True))
    if options.measure_graphs:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        # What the server holds (torch and the frameworks it imported, hundreds of thousands of
        # objects, no tensor with a graph: it runs no torch op) is left out of the heap a scan
        # walks: the scan reads what the run made, and touches nothing else (a deprecated
        # attribute read there warned on the script's stderr).
        gc.freeze()

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
