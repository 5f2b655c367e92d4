"""Proving rewrites on the user's own smoke run: ``gradfix fix --verify CMD``.

CMD (``python train.py --max-steps 3``, ``pytest tests/test_train.py``) runs in copies of the folder
gradfix runs in, each in a temporary folder removed afterwards: once as the tree is, and once with
the rewrites. It runs through the runner (``trace.py`` is the runner's script and starts CMD), so it
gets the runner's scrubbed environment, limits and timeout, and ``trace.py``, put on CMD's
``PYTHONPATH`` as ``sitecustomize``, records a trace of every Python process without editing the
user's files: which of the user's files ran, the losses backwarded and the parameters after the
first optimizer steps (without an optimizer, the gradients the backward calls left), the exception
if any.

A rewrite is verified when the two traces agree (to the tolerance fixtures are checked with) and
CMD ends the same way, printing the same lines (a printed tensor's autograd annotations aside, which
a value logged detached loses); or, when the original fails with the second-backward error, when the
rewritten run completes, and, if every fix of the rewrite is one whose rule promises the gradients
of ``retain_graph=True``, agrees with the original run with ``retain_graph=True`` forced. A rewrite
of a file CMD never ran is not exercised. Rewrites are tried together first; a set that fails is
split in two, and each half tried on its own, down to single files.

CMD comes from the command line only: nothing read from the tree chooses what runs. The traces
are written by the user's code, so they are read as JSON of the expected shape, size-bounded, and
only ever decide whether a rewrite is applied.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from .. import typed_json
from ..files import outside
from ..registry import rule_by_code
from ..report import FileReport
from ..rule import FixKind
from . import trace
from .runner import COMPARED_STEPS, RunOptions, RunResult, ScriptRunner, _regular_file_bytes
from .gradients import compare_gradients

COMMAND_TIMEOUT = 300.0  # seconds one run of CMD may take: a smoke run, on a loaded machine
TRACE_LIMIT = 16 << 20  # bytes of one process's trace read back; a bigger one is unreadable
SECOND_BACKWARD = "backward through the graph a second time"
# What a printed tensor says of the graph it holds (tensor(0.98, grad_fn=<DivBackward0>)): a value
# logged detached prints without it, and its numbers are what CMD's output is compared by.
AUTOGRAD_ANNOTATION = re.compile(r", (?:grad_fn=<[^<>]*>|requires_grad=True)")
# Not copied for a run: version control, caches (every module must be compiled to be seen running)
# and virtualenvs (CMD finds its interpreter by an absolute path or PATH).
NOT_COPIED = frozenset({
    ".git", ".hg", ".svn", ".bzr", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".gradfix_cache",
    ".tox", ".nox", ".venv", "venv", "node_modules",
})  # fmt: skip


class BadCommand(ValueError):
    """CMD cannot be run: the message says why."""


EVENT_KINDS = ("process", "backward", "step", "gradients", "error")  # what a trace records beside the files CMD compiled


@dataclass
class TraceEvent:
    kind: str  # one of EVENT_KINDS (detail: the command line, the call's or step's number, "", the error), or "file" (detail: its path)
    detail: str
    values: list[float]


@dataclass
class CommandRun:
    result: RunResult  # of the runner's script, which exits with CMD's status
    events: list[TraceEvent] = field(default_factory=list)  # every process's, processes by command line
    files: set[str] = field(default_factory=set)  # the tree's files CMD compiled, relative to it
    unreadable: str = ""  # why a process's trace could not be read

    @property
    def output(self) -> list[str]:
        """The lines CMD printed on stdout, printed tensors without their autograd annotations."""
        return AUTOGRAD_ANNOTATION.sub("", self.result.stdout).splitlines()

    @property
    def second_backward(self) -> bool:
        return any(e.kind == "error" and SECOND_BACKWARD in e.detail for e in self.events)

    @property
    def completed(self) -> bool:
        return self.result.status == "ok" and not any(e.kind == "error" for e in self.events)

    def outcome(self) -> str:
        errors = [e.detail for e in self.events if e.kind == "error"]
        if self.result.status == "error" and self.result.error_type == "SystemExit":
            ended = f"exits with status {self.result.error_message}"
        else:
            ended = "exits with status 0" if self.result.status == "ok" else self.result.describe()
        return ended + (f" after {errors[0]}" if errors else "")


@dataclass(frozen=True)
class Verdict:
    path: str
    status: str  # "verified", "refused" or "not exercised"
    detail: str


def command_arguments(command: str) -> list[str]:
    """CMD as the program and arguments it runs (no shell); ``BadCommand`` if it names none."""
    try:
        arguments = shlex.split(command)
    except ValueError as error:
        raise BadCommand(f"--verify {command!r}: {error}") from None
    if not arguments:
        raise BadCommand("--verify names no command")
    if shutil.which(arguments[0]) is None:
        raise BadCommand(f"--verify {command!r}: no program {arguments[0]!r} (not found on PATH)")
    return arguments


def verify_rewrites(reports: Iterable[FileReport], command: str, runner: ScriptRunner, root: Path, timeout: float = COMMAND_TIMEOUT) -> list[Verdict]:
    """A verdict on each changed report's rewrite, from runs of ``command`` in copies of ``root``."""
    arguments = command_arguments(command)
    rewrites = [r for r in reports if r.changed]
    if not rewrites:
        return []
    root = Path(os.path.realpath(root))
    places = {id(r): _place_in(root, r.path) for r in rewrites}
    verdicts = [Verdict(r.path, "not exercised", f"outside {root}, where CMD runs") for r in rewrites if places[id(r)] is None]
    inside = [r for r in rewrites if places[id(r)] is not None]
    if not inside:
        return verdicts
    with tempfile.TemporaryDirectory(prefix="gradfix-verify-") as scratch:
        runs = _Runs(Path(scratch), root, arguments, runner, timeout, [(places[id(r)], r) for r in inside])
        original, together = runs.run([]), runs.run(inside)
        ran = original.files | together.files
        verdicts += [Verdict(r.path, "not exercised", "CMD never ran it") for r in inside if places[id(r)] not in ran]
        exercised = [r for r in inside if places[id(r)] in ran]
        if exercised:
            judge = _Judge(original, runs)
            verdicts += _bisected(exercised, judge, together)
    order = {r.path: index for index, r in enumerate(rewrites)}
    return sorted(verdicts, key=lambda v: order[v.path])


def _place_in(root: Path, path: str) -> str | None:
    """``path`` relative to ``root``, where a copy of ``root`` holds it; None if it is not inside."""
    if outside(path, root):
        return None
    relative = os.path.relpath(os.path.realpath(path), root)
    return None if any(part in NOT_COPIED for part in Path(relative).parts) else relative


class _Runs:
    """Runs of CMD, each in a fresh copy of the tree holding the rewrites asked for (and the other
    checked files as gradfix read them)."""

    def __init__(
        self, scratch: Path, root: Path, arguments: list[str], runner: ScriptRunner, timeout: float, rewrites: list[tuple[str, FileReport]]
    ) -> None:
        self.scratch, self.root, self.arguments, self.runner, self.timeout = Path(os.path.realpath(scratch)), root, arguments, runner, timeout
        self.rewrites = rewrites
        self.count = 0
        bootstrap = scratch / "bootstrap"
        bootstrap.mkdir()
        shutil.copyfile(trace.__file__, bootstrap / "sitecustomize.py")
        self.python_path = os.pathsep.join(filter(None, [str(bootstrap), os.environ.get("PYTHONPATH")]))

    def run(self, applied: list[FileReport], retain_graph: bool = False) -> CommandRun:
        self.count += 1
        tree, traces = self.scratch / f"tree-{self.count}", self.scratch / f"traces-{self.count}"
        try:
            shutil.copytree(self.root, tree, symlinks=True, ignore=self._not_copied)
        except shutil.Error as error:  # one entry per file that failed: the first says enough
            source, _, why = error.args[0][0]
            raise BadCommand(f"cannot copy {source} to run CMD in: {why}") from None
        except OSError as error:
            raise BadCommand(f"cannot copy {self.root} to run CMD in: {error}") from None
        traces.mkdir()
        for place, report in self.rewrites:
            _write_inside(tree, place, report.rewritten if any(r is report for r in applied) else report.original)
        environment = {
            "PYTHONPATH": self.python_path,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
            trace.FOLDER_VARIABLE: str(traces),
            trace.ROOT_VARIABLE: str(tree),
            trace.STEPS_VARIABLE: str(COMPARED_STEPS),
            trace.RETAIN_VARIABLE: "1" if retain_graph else "",
        }
        options = RunOptions(args=tuple(self.arguments), timeout=self.timeout, cwd=str(tree), env=tuple(environment.items()))
        result = self.runner.run(trace.__file__, options)
        result.stdout = result.stdout.replace(os.path.join(tree, ""), "")  # as the trace leaves the copy's path out
        run = _read_traces(traces, result)
        shutil.rmtree(tree, ignore_errors=True)  # a copy per run: the next one starts from a clean tree
        return run

    def _not_copied(self, folder: str, names: list[str]) -> set[str]:
        """What a copy leaves out: ``NOT_COPIED``, the scratch folder (the tree may hold the
        temporary folder: a copy would copy itself), and what is neither a folder, a regular file
        nor a link (reading a FIFO would block the copy), or has vanished meanwhile."""
        left_out = set()
        for name in names:
            path = os.path.join(folder, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                left_out.add(name)
                continue
            if name in NOT_COPIED or not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)) or path == str(self.scratch):
                left_out.add(name)
        return left_out


def _write_inside(tree: Path, place: str, data: bytes | None) -> None:
    """Write ``data`` at ``place`` in the copy (a path with no link in it: ``_place_in``), never
    through a link, which may lead out of the copy."""
    descriptor = os.open(tree / place, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(data or b"")


def _read_traces(folder: Path, result: RunResult) -> CommandRun:
    run = CommandRun(result)
    processes = []
    for path in sorted(folder.iterdir()):
        data = _regular_file_bytes(str(path), TRACE_LIMIT + 1)
        if len(data) > TRACE_LIMIT:
            run.unreadable = f"a trace over {TRACE_LIMIT} bytes"
            continue
        try:
            events = [typed_json.loads(line, TraceEvent) for line in data.splitlines()]
        except typed_json.UnexpectedData as error:
            run.unreadable = f"a trace gradfix cannot read ({error})"
            continue
        run.files |= {e.detail for e in events if e.kind == "file"}
        processes.append([e for e in events if e.kind != "file"])
    for events in sorted(processes, key=lambda events: [e.detail for e in events[:1]]):
        run.events += events
    return run


class _Judge:
    """Whether CMD with a set of rewrites agrees with CMD on the tree as it is."""

    def __init__(self, original: CommandRun, runs: _Runs) -> None:
        self.original, self.runs = original, runs
        self._retained: CommandRun | None = None
        self._original_again: CommandRun | None = None  # tells what CMD prints differently every run

    def __call__(self, rewrites: list[FileReport], rewritten: CommandRun | None = None) -> str | None:
        """None when the rewrites are verified, else where the runs part."""
        if rewritten is None:
            rewritten = self.runs.run(rewrites)
        if self.original.second_backward:
            if not rewritten.completed:
                return f"the original fails with the second-backward error; with the rewrite CMD {rewritten.outcome()}"
            if not all(_keeps_gradients(r) for r in rewrites):
                return None
            if self._retained is None:
                self._retained = self.runs.run([], retain_graph=True)
            if not any(e.kind in ("step", "gradients") for e in self._retained.events):
                return "the original with retain_graph=True makes no optimizer step and leaves no gradient the rewrite's could match"
            # The promise is the gradients, not the backward calls (a rewrite may merge two).
            return _parting(self._retained, rewritten, "with retain_graph=True", ("process", "step", "gradients", "error"))
        parting = _parting(self.original, rewritten, "")
        if parting is None and rewritten.output != self.original.output:
            if self._original_again is None:
                self._original_again = self.runs.run([])
            parting = _output_parting(self.original.output, self._original_again.output, rewritten.output)
        return parting


def _keeps_gradients(report: FileReport) -> bool:
    """Whether every fix of the rewrite promises the gradients of ``retain_graph=True``."""
    return all(f.fix is FixKind.SAFE and rule_by_code(f.code).KEEPS_GRADIENTS for f in report.fixed)


def _parting(expected: CommandRun, actual: CommandRun, how: str, kinds: tuple[str, ...] = EVENT_KINDS) -> str | None:
    """Where the run with the rewrites first parts from ``expected`` (the original run ``how``),
    on the events of ``kinds``; None if they agree."""
    for run in (expected, actual):
        if run.unreadable:
            return f"CMD left {run.unreadable}"
    original = f"the original{' ' + how if how else ''}"
    compared = [[e for e in run.events if e.kind in kinds] for run in (expected, actual)]
    last = "the start"
    for first, second in zip(*compared):
        where = _event_name(first)
        if (first.kind, first.detail) != (second.kind, second.detail):
            return f"after {last}, {original} shows {where}, the rewrite {_event_name(second)}"
        difference = compare_gradients([(where, first.values)], [(where, second.values)])
        if difference:
            return f"at {difference}"
        last = where
    shorter, longer = sorted(compared, key=len)
    if len(longer) > len(shorter):
        ran = "the rewrite" if longer is compared[1] else original
        return f"after {last}, {ran} goes on to {_event_name(longer[len(shorter)])} where the other run ends"
    if expected.outcome() != actual.outcome():
        return f"CMD {expected.outcome()} on {original}, {actual.outcome()} with the rewrite"
    return None


def _output_parting(original: list[str], again: list[str], rewritten: list[str]) -> str | None:
    """The first line the rewrite prints differently from the original where two runs of the
    original print alike (a timing, a date differ from run to run); None if there is none, or if
    the two runs of the original do not print the same number of lines (they cannot be matched)."""
    if len(original) != len(again):
        return None
    for index in range(max(len(original), len(rewritten))):
        printed = original[index] if index < len(original) else None
        if index < len(again) and again[index] != printed:
            continue
        instead = rewritten[index] if index < len(rewritten) else None
        if instead != printed:
            shown = [repr(line) if line is not None else "nothing" for line in (printed, instead)]
            return f"line {index + 1} of CMD's output: the original prints {shown[0]}, the rewrite {shown[1]}"
    return None


def _event_name(event: TraceEvent) -> str:
    return {
        "backward": f"backward call {event.detail} (its loss)",
        "step": f"optimizer step {event.detail} (the parameters after it)",
        "gradients": "the end (the gradients the backward calls left, and their leaves)",
        "error": event.detail,
        "process": f"the process {event.detail!r}",
    }.get(event.kind, event.kind)


def _bisected(rewrites: list[FileReport], judge: Callable[..., str | None], together: CommandRun | None = None) -> list[Verdict]:
    """Verdicts on ``rewrites``: all verified if they agree together; else each half on its own."""
    parting = judge(rewrites, together)
    if parting is None:
        return [Verdict(r.path, "verified", "") for r in rewrites]
    if len(rewrites) == 1:
        return [Verdict(rewrites[0].path, "refused", parting)]
    half = len(rewrites) // 2
    return _bisected(rewrites[:half], judge) + _bisected(rewrites[half:], judge)
