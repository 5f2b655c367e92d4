"""Execution-guided repair: when no rule can prove a rewrite, try the rewrites that follow from how
autograd failed, at the places the failing run blamed, run each, and keep the one the runs prove.

The failing run names three stacks, each frame in the user's code (the script, the modules and
packages beside it): the backward that failed, the earlier backward (or ``autograd.grad``) that
freed the graph it needed, and the forward that built the freed node; and the values that held
part of the freed graph when it failed (a carried state, a cached tensor, a list of losses). The
candidates are what those mechanics allow there, each kind of rewrite in a module of its own:

* ``repair_backwards.py``: a call of either backward stack dropped, backwards merged, a gradient
  made differentiable;
* ``repair_forwards.py``: at a line of the forward stack, what it stores cut from its graph, or
  computed again where the failing backward needs it;
* ``repair_held_graphs.py``: a value that held the freed graph detached, reset or cleared.

Never ``retain_graph=True``. Each candidate runs in place of the file it rewrites, served from
memory (nothing is written beside the script), with gradients recorded, and the runs judge it
(``repair_judge.py``): accepted, or safe as well.

This module is the search. Candidates run smallest edit first, and the search stops at the first
safe one (at the first accepted one when nothing can be safe: drops run after the others then).
When none is accepted but one got further before failing the same way (a second cell that runs the
code again), the search goes on from that one.
"""

from __future__ import annotations

import contextlib
import os
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator

import libcst as cst

from ..analysis import FileAnalysis, detached_where_stored
from ..parse import parse_source
from ..edits import apply_fixes
from ..files import write_atomically
from ..report import SourceError
from .diagnose import SECOND_BACKWARD, Diagnosis, _explain_error, recording_options, reference_options
from .repair_backwards import _backward_fixes, _differentiable_gradients, _dropped_calls, _merged_backwards
from .repair_candidates import Candidate, Kind, Proposal, _Blamed, _loop_around
from .repair_forwards import (
    _builds_what_fails,
    _computed_again,
    _cutting_fixes,
    _detached_where_freeing_reads,
    _detached_where_stored,
    _last_assignments,
    _recomputed_where_read,
)
from .repair_held_graphs import _held_graph_fixes, _reset_every_iteration
from .repair_judge import Attempt, _judge
from .runner import COMPARED_STEPS, Frame, RunOptions, RunResult, ScriptRunner

CANDIDATE_TIME_SHARE = 3.0  # a candidate runs at most this many times the original's time to its error…
MIN_CANDIDATE_SECONDS = 5.0  # …and at least this long
MAX_ROUNDS = 3  # searches chained from a candidate that got further than the original


@dataclass
class Repair:
    original: bytes
    attempts: list[Attempt] = field(default_factory=list)
    reference: RunResult | None = None  # the original with retain_graph=True, gradients recorded

    @property
    def chosen(self) -> Attempt | None:
        accepted = [(index, a) for index, a in enumerate(self.attempts) if a.accepted]
        # Safe first; among the others a rewrite that keeps every backward the author wrote (a drop
        # gives up the gradients of one), then one that keeps every gradient path of those, then
        # the smallest edit. (Not the gradients closest to the run that keeps every graph: for a
        # stale cache or state, that run keeps the bug.)
        best = min(
            accepted,
            key=lambda item: (
                not item[1].safe,
                item[1].candidate.kind is Kind.DROPS,
                bool(item[1].removed),
                item[1].candidate.changed_lines(self.original),
                item[0],
            ),
            default=None,
        )
        return best[1] if best else None

    def why(self) -> str:
        chosen = self.chosen
        if chosen is None:
            return self._why_none()
        if chosen.safe:
            return "it runs clean and its gradients equal those of the original run with retain_graph=True"
        if chosen.removed:
            return (
                "it runs clean and every leaf an optimizer trains keeps a gradient at every step, but the maths changes "
                f"(no candidate keeping every gradient path was accepted): {chosen.removed}"
            )
        if not chosen.compared:
            return (
                "it runs clean, keeps every gradient and the steps the original completed; the original fails even "
                f"with retain_graph=True, so nothing shows the maths is kept: it {chosen.candidate.change}"
            )
        return "it runs clean and keeps every gradient, but their values differ from the retain_graph=True run: the maths changes"

    def _why_none(self) -> str:
        """Why no candidate was accepted, in one line."""
        if not self.attempts:
            return "no candidate rewrite at the blamed lines"
        clean = [a for a in self.attempts if a.run is not None and a.run.succeeded]
        if not clean:
            return f"no candidate rewrite ran clean ({len(self.attempts)} tried)"
        reasons = []
        losing = [a for a in clean if a.lost]
        if losing:
            reasons.append(f"{len(losing)} run clean but lose a gradient the original computes ({losing[0].lost})")
        changing = [a for a in clean if a.changed_completed and not a.lost]
        if changing:
            reasons.append(f"{len(changing)} run clean but change the steps the original completed before failing")
        if len(self.attempts) > len(clean):
            reasons.append(f"{len(self.attempts) - len(clean)} still fail")
        return "no candidate rewrite is accepted: " + ", ".join(reasons)


def write_chosen(searched: Repair, script: Path) -> None:
    """Write the chosen rewrite over ``script`` and the modules beside it that it rewrites,
    atomically, only if each file is still what the search read (``engine.FileChanged`` otherwise)."""
    for path, (original, rewritten) in searched.chosen.candidate.files(script).items():
        write_atomically(path, rewritten, expected=original or searched.original)


def repair(diagnosis: Diagnosis, runner: ScriptRunner, options: RunOptions, budget: float = 120.0, jobs: int = 1) -> Repair:
    """Search the candidate rewrites for ``diagnosis`` (a second-backward error) within ``budget``
    seconds in all; each run keeps the bounds of ``options``. With ``jobs`` above 1, that many
    runs go at once, the others on twins of ``runner`` (forked, so warm at once), closed when
    the search ends."""
    deadline = time.monotonic() + budget
    original = diagnosis.run
    result = Repair(diagnosis.source)
    recording = replace(
        recording_options(options),
        stop_after=min(options.stop_after or options.timeout, max(MIN_CANDIDATE_SECONDS, CANDIDATE_TIME_SHARE * original.seconds)),
    )
    if jobs > 1:
        recording = replace(recording, threads=max(1, (os.cpu_count() or 1) // jobs))
    beside = diagnosis.reference
    if beside is not None and original.backward_calls > COMPARED_STEPS:
        beside.stop()  # bounded before the traced run told how many backward calls it makes: too few
        beside = None
    with contextlib.ExitStack() as extra_runners:
        idle: queue.SimpleQueue[ScriptRunner] = queue.SimpleQueue()
        idle.put(runner)
        for _ in range(jobs - 1):
            idle.put(extra_runners.enter_context(runner.twin()))

        def run(candidate: Candidate | None, bounds: RunOptions) -> RunResult | None:
            free = idle.get()
            try:
                files = candidate.files(diagnosis.script) if candidate is not None else {}
                sources = tuple((str(path), rewritten) for path, (_, rewritten) in files.items())
                return _run_bounded(free, diagnosis.script, replace(bounds, sources=sources), deadline)
            finally:
                idle.put(free)

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            reference = (
                pool.submit(beside.result) if beside is not None else pool.submit(run, None, reference_options(recording, original.backward_calls))
            )
            found = candidates(diagnosis)
            result.reference = reference.result()
            can_be_safe = result.reference is not None and result.reference.succeeded
            reached = original  # the run the candidates of this round must get further than
            for round_number in range(MAX_ROUNDS):
                found = _ordered(found, diagnosis.source, can_be_safe)
                if _search(found, result, original, lambda c: pool.submit(run, c, recording), jobs):
                    break
                further = _got_further(result.attempts[-len(found) :] if found else [], reached)
                if further is None or round_number + 1 == MAX_ROUNDS or time.monotonic() > deadline - 1:
                    break
                reached = further.run
                found = _candidates_on_top_of(further, diagnosis, runner, options, deadline)
    return result


def _ordered(found: list[Candidate], original: bytes, can_be_safe: bool) -> list[Candidate]:
    """Smallest edit first; among equal ones, in the order they were found. When nothing can be
    safe, the search stops at the first accepted candidate, so the order is the choice: drops go
    after the others then, as the choice ranks them (a drop gives up the gradients of a backward
    the author wrote)."""
    return sorted(found, key=lambda candidate: (not can_be_safe and candidate.kind is Kind.DROPS, candidate.changed_lines(original)))


def _search(found: list[Candidate], result: Repair, original: RunResult, submit, jobs: int) -> bool:
    """Run ``found`` in order, ``jobs`` at a time, judging each; stop at the first safe one, or at
    the first accepted one that removes no gradient path when nothing can be safe. Whether it
    found one to stop at."""
    retained = result.reference if result.reference is not None and result.reference.succeeded else None
    for start in range(0, len(found), jobs):
        wave = [(candidate, submit(candidate)) for candidate in found[start : start + jobs]]
        for candidate, future in wave:
            attempt = Attempt(candidate, future.result())
            _judge(attempt, original, retained)
            result.attempts.append(attempt)
        if any(a.safe if retained is not None else a.accepted and not a.removed for a in result.attempts):
            return True
    return False


def _got_further(attempts: list[Attempt], reached: RunResult) -> Attempt | None:
    """The candidate that, failing the same way, got furthest past where ``reached`` failed."""

    def progress(run: RunResult) -> tuple[int, int]:
        return run.optimizer_steps, run.backward_calls

    further = [
        a
        for a in attempts
        if a.run is not None and a.run.status == "error" and SECOND_BACKWARD in a.run.error_message and progress(a.run) > progress(reached)
    ]
    return max(further, key=lambda a: progress(a.run), default=None)


def _candidates_on_top_of(attempt: Attempt, diagnosis: Diagnosis, runner: ScriptRunner, options: RunOptions, deadline: float) -> list[Candidate]:
    """The candidates for where ``attempt``'s rewrite fails, each written on top of it."""
    base = attempt.candidate
    files = base.files(diagnosis.script)
    sources = tuple((str(path), rewritten) for path, (_, rewritten) in files.items())
    run = _run_bounded(
        runner,
        diagnosis.script,
        replace(options, detect_anomaly=True, record_gradients=True, recorded_steps=COMPARED_STEPS, sources=sources),
        deadline,
    )
    if run is None or run.status != "error" or SECOND_BACKWARD not in run.error_message:
        return []
    script_source = files.get(diagnosis.script, (b"", diagnosis.source))[1]
    try:
        analysis = FileAnalysis(parse_source(script_source, str(diagnosis.script)))
    except SourceError:
        return []
    again = Diagnosis(diagnosis.script, script_source, analysis, run, notebook=diagnosis.notebook)
    _explain_error(analysis, [], again)
    modules = {path: rewritten for path, (_, rewritten) in files.items() if path != diagnosis.script}
    return [replace(c, base=base) for c in candidates(again, modules)]


def candidates(diagnosis: Diagnosis, modules: dict[Path, bytes] | None = None) -> list[Candidate]:
    """Every distinct rewrite of the vocabulary at the places the run blamed: in the script, then
    in the modules beside it on the blamed stacks (``modules``: ones already rewritten)."""
    found: list[Candidate] = []
    seen: set[tuple[Path | None, bytes]] = set()
    for blamed in _blamed_files(diagnosis, modules or {}):
        for candidate in _rewrites(blamed, _fixes(blamed, diagnosis)):
            if (candidate.module, candidate.source) not in seen:
                seen.add((candidate.module, candidate.source))
                found.append(candidate)
    return found


def _blamed_files(diagnosis: Diagnosis, modules: dict[Path, bytes]) -> Iterator[_Blamed]:
    run = diagnosis.run
    stacks = (run.forward_frames, run.failing_frames, run.freeing_frames, run.reading_frames, run.freeing_reading_frames)
    paths = dict.fromkeys([""] + [frame.path for stack in stacks for frame in reversed(stack) if frame.path])
    for name in paths:
        if not name:
            analysis = diagnosis.analysis
        else:
            try:
                source = modules.get(Path(name)) or Path(name).read_bytes()
                analysis = FileAnalysis(parse_source(source, name))
            except (OSError, SourceError):
                continue  # a module that cannot be read or parsed gets no candidate

        def lines(frames: list[Frame]) -> list[int]:
            return [frame.line for frame in reversed(frames) if frame.path == name]

        yield _Blamed(
            Path(name) if name else None,
            analysis,
            lines(run.forward_frames),
            lines(run.failing_frames),
            lines(run.freeing_frames),
            lines(run.reading_frames),
            lines(run.freeing_reading_frames),
            set(lines(run.step_frames)),
            [held for held in run.held_graphs if held.path == name],
        )


def _rewrites(blamed: _Blamed, fixes: Iterable[Proposal]) -> list[Candidate]:
    analysis = blamed.analysis
    found: dict[bytes, Candidate] = {}
    for description, fix, kind, change in fixes:
        taken_away = fix.taken_away()
        if any(analysis.updates_parameters(s) or analysis.line(s) in blamed.steps for s in taken_away):
            continue  # never remove or move an optimizer update
        try:
            source = apply_fixes(analysis.module, [fix]).bytes
            cst.parse_module(source)
        except (cst.CSTValidationError, cst.ParserSyntaxError):
            continue  # a rewrite that is not valid Python is not a candidate
        if source != analysis.module.bytes and source not in found:
            original = analysis.module.bytes if blamed.path is not None else b""
            found[source] = Candidate(description, source, kind, change, blamed.path, original)
    return list(found.values())


def _fixes(blamed: _Blamed, diagnosis: Diagnosis) -> Iterator[Proposal]:
    analysis = blamed.analysis
    failing = blamed.statement(blamed.failing)
    freeing = blamed.statement(blamed.freeing)
    yield from _dropped_calls(blamed)
    yield from _differentiable_gradients(blamed)
    if failing is not None:
        yield from _backward_fixes(analysis, failing)
        yield from _merged_backwards(blamed, freeing, failing)
    lines = blamed.forward
    if not lines and failing is not None and blamed.path is None:
        # A framework may swallow anomaly mode's forward trace: then the statements that last
        # assigned what the failing backward reads stand in for it.
        lines = [analysis.line(s) for s in _last_assignments(analysis, failing)]
    blamed_statements: list[cst.SimpleStatementLine] = []
    for line in lines:
        statement = analysis.statement_at(line)
        if statement is not None and statement is not failing and all(statement is not b for b in blamed_statements):
            blamed_statements.append(statement)
    for line in dict.fromkeys(blamed.reading):
        statement = analysis.statement_at(line)
        if statement is not None and statement is not failing and all(statement is not b for b in blamed_statements):
            # Where the failing graph reads the freed one: what it stores is cut there.
            yield from _cutting_fixes(blamed, statement, detached_where_stored(statement), build_without_graph=False)
    for statement in blamed_statements:
        if not _builds_what_fails(analysis, statement, failing):
            stored = _detached_where_stored(analysis, statement) if blamed.path is None else detached_where_stored(statement)
            yield from _cutting_fixes(blamed, statement, stored)
        yield from _computed_again(blamed, statement, failing)
        yield from _recomputed_where_read(blamed, statement)
    # After the cuts of the forward stack: where both are safe, the one the author's code suggests
    # (the value detached where it is stored) is the one written.
    yield from _detached_where_freeing_reads(blamed)
    yield from _held_graph_fixes(blamed, failing, freeing)
    loop = _loop_around(analysis, failing)
    if loop is not None:
        yield from _reset_every_iteration(analysis, loop.node)


def _run_bounded(runner: ScriptRunner, script: Path, options: RunOptions, deadline: float) -> RunResult | None:
    remaining = deadline - time.monotonic()
    if remaining < 1:
        return None
    timeout = min(options.timeout, remaining)
    stop_after = min(options.stop_after, timeout * 0.9) if options.stop_after is not None else None
    return runner.run(script, replace(options, timeout=timeout, stop_after=stop_after))
