"""Execution-guided repair: when no rule can prove a rewrite, try the rewrites that follow from how
autograd failed, at the places the failing run blamed, run each, and keep the one the runs prove.

The failing run names three stacks, each frame in the user's code (the script, the modules and
packages beside it): the backward that failed, the earlier backward (or ``autograd.grad``) that
freed the graph it needed, and the forward that built the freed node; and the values that held
part of the freed graph when it failed (a carried state, a cached tensor, a list of losses). The
candidates are what those mechanics allow there:

* drop a call at any frame of either backward stack (never one that steps an optimizer);
* merge backwards of values sharing a graph: two in one function (across the ``if`` around the
  second), the backward of each loss of a loop (summed, backwarded once after the loop), one in a
  helper deferred to the backward that failed, or one in a hook added to the loss the hook returns;
  make an ``autograd.grad`` whose graph a later backward needs differentiable (``create_graph``);
* at a line of the forward stack: detach what it stores, build it under ``torch.no_grad()``,
  compute it again before the failing backward or at the start of the loop that backwards it
  (with the lines it is computed from), or again where a stored copy of it is read;
* where the backward that freed the graph read the graph the failing one shares with it (an
  auxiliary loss backwarded inside a forward, a peer's or teacher's outputs): detach what it reads
  there, so that backward stops short of the shared graph;
* for a value that held the freed graph: detach it after the backward that freed it (following its
  structure: tuple, list, dict, namedtuple, an object's own ``detach()``), reset it as its class's
  constructor does, clear a container every iteration, or detach it where the failing backward's
  code reads it.

Never ``retain_graph=True``. Each candidate runs in place of the file it rewrites, served from
memory (nothing is written beside the script), with gradients recorded. The judge:

* it runs clean (to the end, or for a few times the original's time to its error);
* it loses no gradient: every leaf an optimizer of the original trains (without one, every leaf
  it updates by hand) that a backward of the original reached (the failing one included) still
  gets one, at every step of the optimizer that owns it. A backward that no longer reaches a leaf
  it reached (a teacher's weights, the encoder under an auxiliary loss) removes that gradient
  path: the rewrite changes the maths, says which path it removes, and ranks after the ones
  that remove none;
* it keeps what worked: the gradients of the optimizer steps the original completed before it
  failed are unchanged;
* it is *safe* when its gradients equal those of the original run with ``retain_graph=True``: the
  maths is what the author wrote. Any other accepted candidate changes the maths (each says how,
  e.g. "truncates backpropagation at each iteration") and is written only with ``--unsafe-fixes``.
  When the ``retain_graph=True`` run itself fails, nothing can be safe.

Candidates run smallest edit first, and the search stops at the first safe one (at the first
accepted one when nothing can be safe: drops run after the others then). When none is accepted
but one got further before failing the same way (a second cell that runs the code again), the
search goes on from that one.
"""

from __future__ import annotations

import builtins
import contextlib
import difflib
import enum
import os
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Iterator

import libcst as cst

from ..analysis import (
    FileAnalysis,
    GradientEffect,
    as_operand,
    assigned_names,
    code_of,
    detached_where_stored,
    find_nodes,
    is_name,
    is_single_call,
    method_called,
    read_names,
    with_backward_merged_into_branches,
)
from ..parse import parse_source
from ..edits import Fix, apply_fixes
from ..files import write_atomically
from ..report import SourceError
from .diagnose import (
    SECOND_BACKWARD,
    Diagnosis,
    _explain_error,
    gradients_lost,
    leaves_in_words,
    recording_options,
    reference_options,
    trained_leaves,
)
from .gradients import compare_gradients
from .runner import COMPARED_STEPS, Frame, HeldGraph, RunOptions, RunResult, ScriptRunner

CANDIDATE_TIME_SHARE = 3.0  # a candidate runs at most this many times the original's time to its error…
MIN_CANDIDATE_SECONDS = 5.0  # …and at least this long
MAX_ROUNDS = 3  # searches chained from a candidate that got further than the original


class Kind(enum.Enum):
    """How a rewrite treats the graphs."""

    CUTS = "cuts a graph"  # detach, no_grad
    KEEPS = "keeps every graph"  # computes again, makes a gradient differentiable
    MERGES = "merges backwards"
    DROPS = "drops a call that backwards"


@dataclass(frozen=True)
class Candidate:
    description: str  # what the rewrite does, and where
    source: bytes
    kind: Kind
    change: str  # what it changes in the maths, unless a run proves it changes nothing
    module: Path | None = None  # the module beside the script it rewrites; None: the script
    module_original: bytes = b""  # that module as it was read
    base: "Candidate | None" = None  # the rewrite this one was found on top of

    def files(self, script: Path) -> dict[Path, tuple[bytes, bytes]]:
        """Every file this rewrite (and the ones it builds on) writes: path → (original, rewritten)."""
        written = self.base.files(script) if self.base is not None else {}
        path = self.module if self.module is not None else script
        original = written[path][0] if path in written else self.module_original
        written[path] = (original, self.source)
        return written

    def changed_lines(self, original: bytes) -> int:
        """Lines changed from what was read, in every file the rewrite writes: a line rewritten
        counts once, as a line added or removed does."""
        changed = 0
        for before, after in self.files(Path()).values():
            lines = [text.decode(errors="replace").splitlines() for text in (before or original, after)]
            for operation, start, end, new_start, new_end in difflib.SequenceMatcher(None, *lines, autojunk=False).get_opcodes():
                if operation != "equal":
                    changed += max(end - start, new_end - new_start)
        return changed


@dataclass
class Attempt:
    candidate: Candidate
    run: RunResult | None  # None when the time budget ran out before it could run
    compared: bool = False  # there was a retain_graph=True run to compare gradients with
    gradient_difference: str | None = None  # what differs from it, over the steps both reached
    lost: str = ""  # a gradient the original asks for that this rewrite never computes
    changed_completed: str = ""  # how it changes the optimizer steps the original completed
    removed: str = ""  # the gradient paths of the original it removes, in words

    @property
    def accepted(self) -> bool:
        return self.run is not None and self.run.succeeded and not self.lost and not self.changed_completed

    @property
    def safe(self) -> bool:
        return self.accepted and self.compared and self.gradient_difference is None

    def outcome(self) -> str:
        if self.run is None:
            return "not run: the time budget was spent"
        if not self.run.succeeded:
            return self.run.describe().split(". ")[0]
        if self.lost:
            return f"runs, but loses gradients the original computes ({self.lost})"
        if self.changed_completed:
            return f"runs, but changes the steps the original completed before failing ({self.changed_completed})"
        if self.safe:
            return "runs clean; gradients equal the retain_graph=True run"
        difference = f" ({self.gradient_difference})" if self.compared else ""
        if self.removed:
            return f"runs clean and every trained leaf keeps a gradient, but {self.removed}: it {self.candidate.change}{difference}"
        if self.compared:
            return f"runs clean and loses no gradient, but it {self.candidate.change}{difference}"
        return f"runs clean and loses no gradient; it {self.candidate.change}"


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


def _judge(attempt: Attempt, original: RunResult, retained: RunResult | None) -> None:
    """What the runs show of a candidate: the gradients it loses, whether it changes the steps
    that worked, and how its gradients compare with the run that kept every graph."""
    run = attempt.run
    if run is None or not run.succeeded:
        return
    # Gradients something applies: an optimizer's, or those the original applied by hand (a
    # frozen encoder or a ground-truth tensor may require a gradient no one wants).
    attempt.lost = gradients_lost(original, run)
    if not attempt.lost:
        # An optimizer's parameter the original trains must get a gradient at each of its steps:
        # a cache detached after the first step still trains it once.
        trained = trained_leaves(original)
        lost = sorted({label for label, values in _step_gradients(run) if not values and label in trained})
        if lost:
            attempt.lost = f"{leaves_in_words(original, lost)} gets no gradient"
    attempt.removed = _removed_paths(original, run)
    completed = _compared_gradients(original, original)
    if completed:
        actual = _compared_gradients(run, original)[: len(completed)]
        difference = compare_gradients(completed, actual) if len(actual) == len(completed) else "fewer steps recorded"
        attempt.changed_completed = difference or ""
    if retained is not None:
        expected = _compared_gradients(retained, retained)
        actual = _compared_gradients(run, retained)
        common = min(len(expected), len(actual))
        attempt.compared = True
        attempt.gradient_difference = compare_gradients(expected[:common], actual[:common]) if common else "no optimizer step recorded"


def _removed_paths(original: RunResult, run: RunResult) -> str:
    """The leaves a backward of the original reached that the same backward of ``run`` (the same
    code) no longer reaches, in words; "" when there are none."""
    removed = []
    for site, reached in original.reached_by_backward.items():
        if site in run.reached_by_backward and reached - run.reached_by_backward[site]:
            removed.append(f"the backward at {site} no longer reaches {leaves_in_words(original, sorted(reached - run.reached_by_backward[site]))}")
    return "; ".join(removed)


def _step_gradients(run: RunResult) -> list[tuple[str, list[float]]]:
    return [(label, values) for label, values in run.gradients if label.startswith("optimizer ")]


def _compared_gradients(run: RunResult, reference: RunResult) -> list[tuple[str, list[float]]]:
    """The gradients of ``run`` compared with ``reference``'s: at each optimizer step; without an
    optimizer, after each backward, of the tensors the reference run updated (a gradient nothing
    applies is not one the rewrite must keep)."""
    if _step_gradients(reference) or reference.optimizer_steps:
        return _step_gradients(run)
    updated = reference.updated_leaves
    return [(label, values) for label, values in run.backward_gradients if label.split(": ", 1)[1] in updated]


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


@dataclass
class _Blamed:
    """One file of the user's code, and its lines on each stack the run showed (innermost first)."""

    path: Path | None  # None: the script
    analysis: FileAnalysis
    forward: list[int]
    failing: list[int]
    freeing: list[int]
    reading: list[int]  # where the failing graph read the freed one
    freeing_reading: list[int]  # where the freeing backward's graph read the one the failing graph shares
    steps: set[int]  # lines that led to an optimizer step
    held: list[HeldGraph]

    def place(self, line: int) -> str:
        return f"line {line}" if self.path is None else f"{self.path.name} line {line}"

    def statement(self, lines: list[int]) -> cst.SimpleStatementLine | None:
        return self.analysis.statement_at(lines[0]) if lines else None

    @property
    def torch(self) -> str | None:
        return next((alias for alias, name in self.analysis.names.aliases.items() if name == "torch"), None)


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


Proposal = tuple[str, Fix, Kind, str]  # description, edit, kind, what it changes


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


def _builds_what_fails(analysis: FileAnalysis, statement: cst.CSTNode, failing: cst.CSTNode | None) -> bool:
    """Whether ``statement`` assigns, just before it in the same block, the tensor the failing
    backward backwards: cut there, the backward has nothing to walk."""
    site = _whole_backward(analysis, failing)
    block = analysis.block_of(statement)
    if site is None or not isinstance(site.tensor, cst.Name) or block is None or analysis.block_of(failing) is not block:
        return False
    return site.tensor.value in assigned_names(statement) and block.index(statement) < block.index(failing)


def _loop_around(analysis: FileAnalysis, statement: cst.CSTNode | None):
    """The innermost ``for``/``while`` around ``statement`` in its own function."""
    if statement is None:
        return None
    function = analysis.function_at(analysis.line(statement))
    return next(
        (loop for loop in analysis.loops_around(statement) if not loop.is_call and analysis.function_at(analysis.line(loop.node)) is function),
        None,
    )


def _dropped_calls(blamed: _Blamed) -> Iterator[Proposal]:
    """Each call at a frame of either backward stack dropped (not one that led to a step)."""
    for line in dict.fromkeys(blamed.freeing + blamed.failing):
        statement = blamed.analysis.statement_at(line)
        if line in blamed.steps or not is_single_call(statement):
            continue
        place = blamed.place(line)
        yield (
            f"drop the call at {place} (`{code_of(statement.body[0]).strip()}`)",
            Fix(safe=False, remove=(statement,)),
            Kind.DROPS,
            f"no longer adds the gradients of the call at {place}",
        )


def _differentiable_gradients(blamed: _Blamed) -> Iterator[Proposal]:
    """An ``autograd.grad`` that freed the graph a later backward needs, made differentiable: a
    penalty computed from its result then trains what the gradient depends on."""
    for line in blamed.freeing[:1]:
        statement = blamed.analysis.statement_at(line)
        if statement is None:
            continue
        for call in find_nodes(statement, cst.Call):
            if blamed.analysis.names.qualify(call.func) != "torch.autograd.grad":
                continue
            if any(a.keyword is not None and a.keyword.value == "create_graph" for a in call.args):
                continue
            args = [a for a in call.args if a.keyword is None or a.keyword.value != "retain_graph"]
            if len(args) > 3 and args[3].keyword is None:
                continue  # retain_graph given by position
            args = [*args[:-1], args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)] if args else args
            args.append(
                cst.Arg(cst.Name("True"), keyword=cst.Name("create_graph"), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
            )
            rewritten = statement.deep_replace(call, call.with_changes(args=args))
            place = blamed.place(line)
            yield (
                f"take the gradient at {place} with create_graph=True",
                Fix(safe=False, replace=((statement, rewritten),)),
                Kind.KEEPS,
                f"makes the gradient taken at {place} differentiable: what is computed from it trains too",
            )


def _merged_backwards(blamed: _Blamed, freeing: cst.CSTNode | None, failing: cst.CSTNode) -> Iterator[Proposal]:
    """Backwards of values that share a graph, made one backward."""
    analysis = blamed.analysis
    earlier = _whole_backward(analysis, freeing) if freeing is not None and freeing is not failing else None
    if earlier is not None and earlier.tensor is not None:
        yield from _added_to_returned(blamed, earlier, failing)
    site = _whole_backward(analysis, failing)
    if site is None or site.tensor is None:
        return
    loop = _loop_around(analysis, failing)
    if freeing is failing and loop is not None and not analysis.updates_parameters(loop.node.body):
        yield from _summed_over_loop(blamed, site, loop.node)
    if earlier is None or earlier.tensor is None:
        return
    same_function = analysis.function_at(analysis.line(freeing)) is analysis.function_at(analysis.line(failing))
    if same_function and analysis.start(freeing) < analysis.start(failing):
        yield from _merged_across_branches(blamed, earlier, site)
    elif not same_function:
        yield from _deferred(blamed, earlier, site)


def _whole_backward(analysis: FileAnalysis, statement: cst.CSTNode | None):
    return next((s for s in analysis.sites_in(statement) if s.is_whole_statement), None)


def _unused_name(analysis: FileAnalysis, wanted: str) -> str:
    taken = analysis.module.code
    name, number = wanted, 2
    while name in taken:
        name, number = f"{wanted}_{number}", number + 1
    return name


def _summed_over_loop(blamed: _Blamed, site, loop: cst.CSTNode) -> Iterator[Proposal]:
    """``for l in losses: l.backward()`` → the losses summed in the loop, backwarded once after it."""
    analysis = blamed.analysis
    base = site.tensor.value if isinstance(site.tensor, cst.Name) else "loss"
    total = _unused_name(analysis, f"{base}_sum")
    start = cst.parse_statement(f"{total} = 0")
    added = cst.parse_statement(f"{total} = {total} + {code_of(site.tensor)}")
    backward = cst.SimpleStatementLine([cst.Expr(site.with_tensor(cst.Name(total)))])
    line = analysis.line(loop)
    yield (
        f"sum the losses the loop at {blamed.place(line)} backwards one by one, and backward the sum once after it",
        Fix(safe=False, insert_before=((loop, (start,)),), replace=((site.statement, added),), insert_after=((loop, (backward,)),)),
        Kind.MERGES,
        f"backwards the losses of the loop at {blamed.place(line)} together, after the loop",
    )


def _merged_across_branches(blamed: _Blamed, earlier, site) -> Iterator[Proposal]:
    """The earlier backward merged into the failing one, which an ``if`` (or several) holds: each
    branch that does not reach the failing backward backwards the earlier loss alone."""
    analysis = blamed.analysis
    block = analysis.block_of(earlier.statement)
    outer = site.statement
    branches: list[cst.If] = []
    while outer is not None and analysis.block_of(outer) is not block:
        outer = analysis.tree.parent(outer)
        if isinstance(outer, cst.If):
            branches.append(outer)
        elif not isinstance(outer, (cst.IndentedBlock, cst.Else)):
            return  # a loop or a function between: the failing backward runs another number of times
    if outer is None or not branches or block.index(outer) < block.index(earlier.statement):
        return
    between = block.statements[block.index(earlier.statement) + 1 : block.index(outer)]
    if any(analysis.updates_parameters(s) for s in between):
        return
    merged_call = analysis.merged_backward([earlier, site])
    if merged_call is None:
        return
    merged = site.statement.with_changes(body=[cst.Expr(merged_call)])
    rewritten = with_backward_merged_into_branches(outer, branches, site.statement, merged, earlier.statement)
    line, earlier_line = analysis.line(site.statement), analysis.line(earlier.statement)
    yield (
        f"merge the backward at {blamed.place(earlier_line)} into the one at {blamed.place(line)}, and keep it alone where that one does not run",
        Fix(safe=False, replace=((outer, rewritten),), remove=(earlier.statement,)),
        Kind.MERGES,
        f"backwards the losses of {blamed.place(earlier_line)} and {blamed.place(line)} together",
    )


def _deferred(blamed: _Blamed, earlier, site) -> Iterator[Proposal]:
    """A backward in a helper (a module's forward) deferred to the backward that failed, which
    then backwards the sum: the losses share a graph."""
    analysis = blamed.analysis
    pending = _unused_name(analysis, "deferred_losses")
    body = analysis.module.body
    first = next((s for s in body if not _is_import_or_docstring(s)), None)
    if first is None:
        return
    kept = cst.parse_statement(f"{pending}.append({code_of(earlier.tensor)})")
    total = cst.parse_expression(f"{code_of(as_operand(site.tensor))} + sum({pending})")
    merged = site.statement.with_changes(body=[cst.Expr(site.with_tensor(total))])
    line, earlier_line = analysis.line(site.statement), analysis.line(earlier.statement)
    yield (
        f"defer the backward at {blamed.place(earlier_line)} to the one at {blamed.place(line)}, which backwards both",
        Fix(
            safe=False,
            insert_before=((first, (cst.parse_statement(f"{pending} = []"),)),),
            replace=((earlier.statement, earlier.statement.with_changes(body=kept.body)), (site.statement, merged)),
            insert_after=((site.statement, (cst.parse_statement(f"{pending}.clear()"),)),),
        ),
        Kind.MERGES,
        f"backwards the loss of {blamed.place(earlier_line)} with the one of {blamed.place(line)}",
    )


def _is_import_or_docstring(statement: cst.BaseStatement) -> bool:
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    small = statement.body[0]
    return isinstance(small, (cst.Import, cst.ImportFrom)) or isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString)


def _added_to_returned(blamed: _Blamed, earlier, failing: cst.CSTNode) -> Iterator[Proposal]:
    """A backward inside a function whose returned loss is what the failing backward backwards
    (a trainer's hook, a loss computation): the loss added to what it returns instead."""
    analysis = blamed.analysis
    function = analysis.function_at(analysis.line(earlier.statement))
    if function is None or not isinstance(function.body, cst.IndentedBlock) or any(function is analysis.function_at(line) for line in blamed.failing):
        return  # the failing backward runs inside it: it does not backward what it returns
    if not _backwards_what_returns(analysis, failing, function.name.value):
        return
    last = function.body.body[-1]
    if not (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return) and last.body[0].value is not None):
        return
    if analysis.block_of(earlier.statement) is None or analysis.block_of(earlier.statement).owner is not function.body:
        return
    returned = last.body[0].value
    total = cst.parse_expression(f"{code_of(as_operand(returned))} + {code_of(earlier.tensor)}")
    line = analysis.line(earlier.statement)
    yield (
        f"add the loss backwarded at {blamed.place(line)} to what `{function.name.value}` returns",
        Fix(safe=False, remove=(earlier.statement,), replace=((last, last.with_changes(body=[last.body[0].with_changes(value=total)])),)),
        Kind.MERGES,
        f"backwards the loss of {blamed.place(line)} with the one `{function.name.value}` returns",
    )


def _backwards_what_returns(analysis: FileAnalysis, failing: cst.CSTNode, name: str) -> bool:
    """Whether the failing backward backwards what a function called ``name`` returns: it runs
    in a framework (no backward of the user's code failed), or the tensor it backwards was
    assigned a call of ``name``."""
    site = _whole_backward(analysis, failing)
    if site is None:
        return not analysis.sites_in(failing)
    block = analysis.block_of(failing)
    if site.tensor is None or not isinstance(site.tensor, cst.Name) or block is None:
        return False
    for earlier in reversed(block.statements[: block.index(failing)]):
        if site.tensor.value in assigned_names(earlier):
            called = {call.func.attr.value if isinstance(call.func, cst.Attribute) else code_of(call.func) for call in find_nodes(earlier, cst.Call)}
            return name in called
    return False


def _reset_every_iteration(analysis: FileAnalysis, loop: cst.CSTNode) -> Iterator[Proposal]:
    """Containers the loop around the failing backward clears only under a condition (``if
    accelerator.sync_gradients:``, every N steps), cleared every iteration instead, just before
    that ``if``: no iteration then reads what an earlier one stored (a feature bank, a buffer)."""
    for branch in find_nodes(loop, cst.If):
        if not isinstance(branch.body, cst.IndentedBlock) or analysis.block_of(branch) is None:
            continue
        resets = [s for s in branch.body.body if _clears(s)]
        if resets and len(resets) < len(branch.body.body):
            names = ", ".join(code_of(s.body[0].value.func.value) for s in resets)
            yield (
                f"clear {names} in every iteration, not only when line {analysis.line(branch)} holds",
                Fix(safe=False, move=tuple((reset, branch) for reset in resets)),
                Kind.KEEPS,
                f"keeps in {names} only what each iteration stores",
            )


def _clears(statement: cst.BaseStatement) -> bool:
    """Whether ``statement`` is ``x.clear()``."""
    return is_single_call(statement) and method_called(call := statement.body[0].value) == "clear" and not call.args


def _cutting_fixes(
    blamed: _Blamed, statement: cst.SimpleStatementLine, stored: cst.SimpleStatementLine | None, build_without_graph: bool = True
) -> Iterator[Proposal]:
    """Replace ``statement`` by ``stored`` (it, detaching what it stores); build it under
    ``torch.no_grad()``."""
    place = blamed.place(blamed.analysis.line(statement))
    if stored is not None:
        yield (
            f"detach the value where it is stored ({place})",
            Fix(safe=False, replace=((statement, stored),)),
            Kind.CUTS,
            f"lets no gradient flow back through what {place} stores",
        )
    torch = blamed.torch
    if torch is not None and build_without_graph:
        guarded = cst.With(
            items=[cst.WithItem(cst.parse_expression(f"{torch}.no_grad()"))],
            body=cst.IndentedBlock([statement.with_changes(leading_lines=[])]),
            leading_lines=statement.leading_lines,
        )
        yield (
            f"build {place} under {torch}.no_grad()",
            Fix(safe=False, replace=((statement, guarded),)),
            Kind.CUTS,
            f"trains nothing through what {place} computes",
        )


def _detached_where_freeing_reads(blamed: _Blamed) -> Iterator[Proposal]:
    """Each value a line reads where the backward that freed the graph read the graph the failing
    backward shares with it, detached there (the input of an auxiliary loss backwarded inside a
    forward, a peer's or teacher's outputs): that backward then stops short of the shared graph,
    and no longer trains what it shares with the failing one through it."""
    analysis = blamed.analysis
    freeing = blamed.place(blamed.freeing[0]) if blamed.freeing else "line ?"
    for line in dict.fromkeys(blamed.freeing_reading):
        statement = analysis.statement_at(line)
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        place = blamed.place(line)
        for operand in _operands(analysis, statement):
            rewritten = statement.visit(_ReadReplacer(operand, cst.parse_expression(f"{operand}.detach()")))
            if not rewritten.deep_equals(statement):
                yield (
                    f"detach {operand} where {place} reads it",
                    Fix(safe=False, replace=((statement, rewritten),)),
                    Kind.CUTS,
                    f"lets no gradient of the backward at {freeing} flow back through {operand} at {place}",
                )


def _operands(analysis: FileAnalysis, statement: cst.SimpleStatementLine) -> list[str]:
    """The names and attributes ``statement`` reads as values, in order: not the functions it
    calls, modules, ``self`` alone, or builtins."""
    called = {code_of(call.func) for call in find_nodes(statement, cst.Call)}
    modules = set(analysis.names.aliases)
    reads = read_names(statement)
    found = set()
    for node in [*find_nodes(statement, cst.Name), *find_nodes(statement, cst.Attribute)]:
        expression = code_of(node)
        # (An attribute's own name, a store's target: not read as a value.)
        if expression in reads and expression not in called and expression.split(".", 1)[0] not in modules:
            found.add(expression)
    found = {e for e in found if e != "self" and not hasattr(builtins, e) and all(part.isidentifier() for part in e.split("."))}
    text = code_of(statement)
    # Not a prefix of another operand (``self`` of ``self.h``): that one is what is read.
    return sorted((e for e in found if not any(o.startswith(e + ".") for o in found)), key=text.find)


def _computed_again(blamed: _Blamed, statement: cst.SimpleStatementLine, failing: cst.CSTNode | None) -> Iterator[Proposal]:
    """The blamed statement computed again: before the failing backward (after whatever stepped
    or freed its graph in between), or at the start of every iteration of the loop that backwards
    it, with the statements before it that it is computed from."""
    analysis = blamed.analysis
    line = analysis.line(statement)
    place = blamed.place(line)
    anchor, recomputed = _recomputed_before(analysis, statement, failing, _holding(blamed, line))
    if recomputed:
        yield (
            f"compute {place} again before the backward at {blamed.place(analysis.line(failing))}",
            Fix(safe=False, insert_before=((anchor, recomputed),)),
            Kind.KEEPS,
            f"computes {place} again after what changed or freed it, at the weights of that time",
        )
    loop = _loop_around(analysis, failing)
    if loop is None or not isinstance(loop.node.body, cst.IndentedBlock) or analysis.contains(loop.node, statement):
        return
    if analysis.function_at(line) is not analysis.function_at(analysis.line(loop.node)):
        return
    block = analysis.block_of(statement)
    if block is None:
        return
    copies = _graph_inputs(analysis, block.statements[: block.index(statement)], [statement], _holding(blamed, line)) + [statement]
    if any(_draws_data(analysis, c) for c in copies):
        return
    loop_place = blamed.place(analysis.line(loop.node))
    yield (
        f"compute {place} again at the start of every iteration of the loop at {loop_place}"
        + (f" (with the {len(copies) - 1} line(s) it is computed from)" if len(copies) > 1 else ""),
        Fix(safe=False, insert_before=((loop.node.body.body[0], tuple(c.with_changes(leading_lines=[]) for c in copies)),)),
        Kind.KEEPS,
        f"computes {place} at every iteration, from the weights of that iteration",
    )


def _graph_inputs(
    analysis: FileAnalysis, before: list[cst.BaseStatement], copies: list[cst.BaseStatement], holding: set[str]
) -> list[cst.BaseStatement]:
    """The statements of ``before`` (in order) that compute, with a graph, what ``copies`` read:
    as the analysis sees it, or as the run saw it (``holding``: names that held the freed graph)."""
    needed = set().union(*(read_names(c) for c in copies)) - set().union(*(assigned_names(c) for c in copies))
    found: list[cst.BaseStatement] = []
    for earlier in reversed(before):
        assigned = assigned_names(earlier) & needed
        if not assigned or not isinstance(earlier, cst.SimpleStatementLine) or len(earlier.body) != 1:
            continue
        small = earlier.body[0]
        value = analysis.value_assigned(small.value) if isinstance(small, cst.Assign) else None
        # The run knows which names held the freed graph (not a leaf made with requires_grad);
        # without it, the analysis tells.
        if value is None or not (assigned & holding if holding else value.graph):
            break  # what the copies need is not a graph this code built: nothing more to compute again
        needed = (needed - assigned) | read_names(earlier)
        found.insert(0, earlier)
    return found


def _recomputed_where_read(blamed: _Blamed, statement: cst.SimpleStatementLine) -> Iterator[Proposal]:
    """What the blamed statement computes, computed again where a stored copy of it is read: an
    attribute set in ``__init__`` (or cached on the first call) and read by the object's methods,
    or a global read by a function."""
    analysis = blamed.analysis
    small = statement.body[0] if len(statement.body) == 1 else None
    if not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return
    function = analysis.function_at(analysis.line(statement))
    target = small.targets[0].target
    attribute, value = _stored_attribute(analysis, function, statement, target, small.value)
    place = blamed.place(analysis.line(statement))
    if attribute is not None:
        yield from _attribute_recomputed(blamed, function, attribute, value, place)
    if function is None and isinstance(target, (cst.Name, cst.Tuple)):
        yield from _global_recomputed(blamed, statement, place)


def _stored_attribute(analysis: FileAnalysis, function, statement, target, value):
    """``self.x`` and the expression it stores: the statement's own target, or the attribute the
    name it assigns is stored into later in the same function."""
    if isinstance(target, cst.Attribute) and is_name(target.value, "self"):
        return target.attr.value, value
    if function is None or not isinstance(target, cst.Name):
        return None, None
    for later in find_nodes(function, cst.Assign):
        stored = later.targets[0].target if len(later.targets) == 1 else None
        if isinstance(stored, cst.Attribute) and is_name(stored.value, "self") and is_name(later.value, target.value):
            return stored.attr.value, value
    return None, None


def _attribute_recomputed(blamed: _Blamed, function, attribute: str, value: cst.BaseExpression, place: str) -> Iterator[Proposal]:
    analysis = blamed.analysis
    class_name = analysis.class_name_of(function) if function is not None else None
    if class_name is None:
        return
    methods = [s for s in analysis.class_body(class_name) if isinstance(s, cst.FunctionDef)]
    replacements = []
    for method in methods:
        if not _available_in(analysis, value, method, same_function=method is function):
            continue
        for statement in find_nodes(method, cst.SimpleStatementLine):
            rewritten = statement.visit(_ReadReplacer(f"self.{attribute}", as_operand(value)))
            if not rewritten.deep_equals(statement):
                replacements.append((statement, rewritten))
    if replacements:
        yield (
            f"compute `self.{attribute}` (stored from {place}) again where it is read",
            Fix(safe=False, replace=tuple(replacements)),
            Kind.KEEPS,
            f"computes `self.{attribute}` where it is read, from the weights of that time",
        )


def _available_in(analysis: FileAnalysis, value: cst.BaseExpression, function: cst.FunctionDef, same_function: bool) -> bool:
    """Whether every name ``value`` reads means the same inside ``function``: ``self``, a name of
    the module, a builtin, or (in the function that computed it) one of its parameters."""
    module_names = set().union(*(assigned_names(s) for s in analysis.module.body)) | set(analysis.names.aliases)
    local = assigned_names(function.body)
    parameters = {p.name.value for p in function.params.params}
    for name in {n.split(".", 1)[0] for n in read_names(value)}:
        if name == "self" and "self" in parameters:
            continue
        if same_function and name in parameters:
            continue
        if name in local or name in parameters:
            return False
        if name not in module_names and not hasattr(builtins, name):
            return False
    return True


class _ReadReplacer(cst.CSTTransformer):
    """Replaces the reads (not the stores, nor ``is None`` tests) of one dotted expression."""

    def __init__(self, expression: str, replacement: cst.BaseExpression) -> None:
        super().__init__()
        self.expression, self.replacement = expression, replacement

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        return False

    def visit_AugAssign(self, node: cst.AugAssign) -> bool:
        return code_of(node.target) != self.expression

    def visit_Comparison(self, node: cst.Comparison) -> bool:
        return not any(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in node.comparisons)

    def leave_Attribute(self, original_node, updated_node):
        return self.replacement if code_of(original_node) == self.expression else updated_node

    def leave_Name(self, original_node, updated_node):
        return self.replacement if original_node.value == self.expression else updated_node


def _global_recomputed(blamed: _Blamed, statement: cst.SimpleStatementLine, place: str) -> Iterator[Proposal]:
    """A global computed at the module's level, computed again at the start of each function on
    the failing stack that reads it (the copy binds a local of the same name)."""
    analysis = blamed.analysis
    names = assigned_names(statement)
    needed = {n.split(".", 1)[0] for n in read_names(statement.body[0].value)}
    for line in dict.fromkeys(blamed.failing + blamed.forward):
        function = analysis.function_at(line)
        if function is None or not isinstance(function.body, cst.IndentedBlock):
            continue
        local = assigned_names(function.body)
        parameters = {p.name.value for p in function.params.params}
        # A parameter of the same name is what the caller passes: most often the same object.
        read = names & read_names(function.body)
        if not read or read & (local | parameters) or needed & local:
            continue
        if any(isinstance(g, cst.Global) for g in find_nodes(function, cst.Global)):
            continue
        first = function.body.body[0]
        anchor = function.body.body[1] if _is_import_or_docstring(first) and len(function.body.body) > 1 else first
        yield (
            f"compute {place} again at the start of `{function.name.value}`, which reads it",
            Fix(safe=False, insert_before=((anchor, (statement.with_changes(leading_lines=[]),)),)),
            Kind.KEEPS,
            f"computes {place} at each call of `{function.name.value}`, from the weights of that time",
        )


def _held_graph_fixes(blamed: _Blamed, failing: cst.CSTNode | None, freeing: cst.CSTNode | None) -> Iterator[Proposal]:
    """The values that held the freed graph: detached after the backward that freed it, reset as
    their constructor sets them, cleared, or detached where the failing backward's code reads them;
    last, detached after that backward with what the code after it builds on."""
    analysis = blamed.analysis
    loop = _loop_around(analysis, failing)
    by_function: dict[int, list[HeldGraph]] = {}
    for held in blamed.held:
        by_function.setdefault(held.function_line, []).append(held)
    built_on_after_freeing: list[Proposal] = []
    for function_line, held in by_function.items():
        function = _function_starting(analysis, function_line)
        in_loop = loop is not None and analysis.function_at(analysis.line(loop.node)) is function
        loop_body = find_nodes(loop.node.body, cst.SimpleStatementLine) if in_loop else []
        carried = [h for h in held if _state_path(h) or _read_before_written(loop_body, h.expression)]
        # An object's own detach() detaches what it holds: its attributes need no statement of their own.
        owners = [h.expression for h in carried if h.structure == "detachable"]
        carried = [h for h in carried if not any(h.expression.startswith(f"{owner}.") for owner in owners)]
        if freeing is not None and analysis.function_at(analysis.line(freeing)) is function:
            yield from _detached_after(blamed, carried, freeing)
            # A value the code after that backward builds a new one on (the sum of losses a second
            # pass adds onto) carries the freed graph on too.
            after = [s for s in _statements_of(analysis, function) if analysis.start(s) > analysis.start(freeing)]
            built_on = [h for h in held if h not in carried and _built_on_before_written(after, h.expression)]
            if built_on:
                built_on_after_freeing.extend(_detached_after(blamed, carried + built_on, freeing))
        if in_loop:
            yield from _reset_where_loop_starts(blamed, carried, loop.node)
        for container in (h for h in held if h.structure in ("list", "dict")):
            yield from _cleared(blamed, container, failing, freeing, function)
    yield from _detached_where_read(blamed, failing, freeing)
    yield from built_on_after_freeing


def _read_before_written(statements: list[cst.SimpleStatementLine], name: str) -> bool:
    """Whether ``statements`` (a loop's body), in order, read ``name`` before they assign it: the
    value then comes from the iteration before."""
    for statement in statements:
        small = statement.body[0] if len(statement.body) == 1 else None
        reads = read_names(small.value) if isinstance(small, cst.Assign) else read_names(statement)
        if name in reads:
            return True
        if name in assigned_names(statement):
            return False
    return False


def _built_on_before_written(statements: list[cst.SimpleStatementLine], name: str) -> bool:
    """Whether ``statements``, in order, compute a value from ``name`` (``total = name + …``,
    ``name += …``) before they assign it anew; a print or a log of it builds nothing."""
    for statement in statements:
        small = statement.body[0] if len(statement.body) == 1 else None
        if isinstance(small, cst.AugAssign) and name in read_names(statement):
            return True
        if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None and name in read_names(small.value):
            return True
        if name in assigned_names(statement):
            return False
    return False


def _state_path(held: HeldGraph) -> bool:
    """An attribute or item: state an object keeps between calls."""
    return "." in held.expression or "[" in held.expression


def _function_starting(analysis: FileAnalysis, line: int) -> cst.FunctionDef | None:
    """The function whose code starts at ``line`` (its ``def``, or its first decorator); None for 0."""
    if not line:
        return None
    for function in find_nodes(analysis.module, cst.FunctionDef):
        starts = [analysis.line(function)] + [analysis.line(d) for d in function.decorators]
        if line in starts:
            return function
    return None


def _detach_statements(held: HeldGraph, torch: str | None) -> list[list[str]]:
    """Ways to detach ``held`` in place of itself, as its structure allows."""
    value = held.expression
    part = "part.detach()" if held.tensor_parts or torch is None else f"part.detach() if {torch}.is_tensor(part) else part"
    item = "item.detach()" if held.tensor_parts or torch is None else f"item.detach() if {torch}.is_tensor(item) else item"
    return {
        "tensor": [[f"{value} = {value}.detach()"]],
        "namedtuple": [[f"{value} = type({value})(*({part} for part in {value}))"]],
        "tuple": [[f"{value} = tuple({part} for part in {value})"]],
        "list": [[f"{value} = [{part} for part in {value}]"]],
        "dict": [[f"{value} = {{key: {item} for key, item in {value}.items()}}"]],
        "detachable": [[f"{value}.detach()"], [f"{value} = {value}.detach()"]],
    }.get(held.structure, [])


def _detached_after(blamed: _Blamed, carried: list[HeldGraph], freeing: cst.CSTNode) -> Iterator[Proposal]:
    if not carried:
        return
    torch = blamed.torch
    place = blamed.place(blamed.analysis.line(freeing))
    names = ", ".join(h.expression for h in carried)
    ways = [_detach_statements(h, torch) for h in carried]
    for variant in range(max(len(w) for w in ways)):
        lines = [line for w in ways if w for line in w[min(variant, len(w) - 1)]]
        if not lines:
            continue
        yield (
            f"detach {names} after the backward at {place}",
            Fix(safe=False, insert_after=((freeing, tuple(cst.parse_statement(text) for text in lines)),)),
            Kind.CUTS,
            f"truncates backpropagation through {names} at each backward at {place}",
        )


def _reset_where_loop_starts(blamed: _Blamed, carried: list[HeldGraph], loop: cst.CSTNode) -> Iterator[Proposal]:
    """State an object keeps, set back where every iteration starts to what its constructor sets
    (``None``): each iteration starts it afresh."""
    if not isinstance(loop.body, cst.IndentedBlock):
        return
    resets = [h.expression for h in carried if h.owner and _constructor_sets_none(blamed.analysis, h.owner, h.expression.rsplit(".", 1)[-1])]
    if not resets:
        return
    place = blamed.place(blamed.analysis.line(loop))
    names = ", ".join(resets)
    yield (
        f"reset {names} where each iteration of the loop at {place} starts",
        Fix(safe=False, insert_before=((loop.body.body[0], tuple(cst.parse_statement(f"{r} = None") for r in resets)),)),
        Kind.CUTS,
        f"starts {names} afresh at each iteration of the loop at {place}, as the constructor does",
    )


def _constructor_sets_none(analysis: FileAnalysis, class_name: str, attribute: str) -> bool:
    constructor = analysis.constructor_of(class_name)
    return constructor is not None and any(
        len(a.targets) == 1 and code_of(a.targets[0].target) == f"self.{attribute}" and is_name(a.value, "None")
        for a in find_nodes(constructor, cst.Assign)
    )


def _cleared(blamed: _Blamed, held: HeldGraph, failing, freeing, function) -> Iterator[Proposal]:
    """A container that keeps the freed graph, cleared where each iteration of a loop around the
    failing backward starts, innermost first, or after the backward that freed it."""
    analysis = blamed.analysis
    clear = cst.parse_statement(f"{held.expression}.clear()")
    if failing is not None:
        for loop in analysis.loops_around(failing):
            if loop.is_call or not isinstance(loop.node.body, cst.IndentedBlock):
                continue
            if analysis.function_at(analysis.line(loop.node)) is not function and function is not None:
                continue
            place = blamed.place(analysis.line(loop.node))
            yield (
                f"clear {held.expression} where each iteration of the loop at {place} starts",
                Fix(safe=False, insert_before=((loop.node.body.body[0], (clear,)),)),
                Kind.CUTS,
                f"keeps in {held.expression} only what each iteration of the loop at {place} stores",
            )
    if freeing is not None:
        place = blamed.place(analysis.line(freeing))
        yield (
            f"clear {held.expression} after the backward at {place}",
            Fix(safe=False, insert_after=((freeing, (clear,)),)),
            Kind.CUTS,
            f"forgets what {held.expression} held once the backward at {place} used it",
        )


def _detached_where_read(blamed: _Blamed, failing: cst.CSTNode | None, freeing: cst.CSTNode | None) -> Iterator[Proposal]:
    """A tensor that held the freed graph, detached where the code of the failing backward's
    stack reads it after the backward that freed it (``self.pred_real`` cached by the
    discriminator's step and read by the generator's; a real score read again by the second
    of two losses): that code then uses its value, not its graph."""
    analysis = blamed.analysis
    scopes = list({id(f): f for f in (analysis.function_at(line) for line in blamed.failing)}.values())
    for held in blamed.held:
        if not held.only_freed:
            continue  # detaching it would cut a graph that is still whole too
        own = _function_starting(analysis, held.function_line)
        for scope in scopes:
            if not (_state_path(held) or held.function_line == 0 or own is scope):
                continue
            after = freeing if freeing is not None and analysis.function_at(analysis.line(freeing)) is scope else None
            replacer = _ReadReplacer(held.expression, cst.parse_expression(f"{held.expression}.detach()"))
            replacements = []
            for statement in _statements_of(analysis, scope):
                if statement is failing or after is not None and analysis.start(statement) <= analysis.start(after):
                    continue
                rewritten = statement.visit(replacer)
                if not rewritten.deep_equals(statement):
                    replacements.append((statement, rewritten))
            if replacements:
                where = f"`{scope.name.value}`" if scope is not None else "the module's code"
                since = f" after the backward at {blamed.place(analysis.line(after))}" if after is not None else ""
                yield (
                    f"detach {held.expression} where {where} reads it{since}",
                    Fix(safe=False, replace=tuple(replacements)),
                    Kind.CUTS,
                    f"lets no gradient flow back through {held.expression} where {where} reads it{since}",
                )


def _statements_of(analysis: FileAnalysis, scope: cst.FunctionDef | None) -> list[cst.SimpleStatementLine]:
    """The statement lines of a function (or of the module's own code), not of functions in it."""
    statements = find_nodes(scope if scope is not None else analysis.module, cst.SimpleStatementLine)
    return [s for s in statements if analysis.function_at(analysis.line(s)) is scope]


def _last_assignments(analysis: FileAnalysis, failing: cst.CSTNode) -> list[cst.CSTNode]:
    """The statements of the failing backward's block that last assigned each name it reads."""
    block = analysis.block_of(failing)
    if block is None:
        return []
    wanted = set(read_names(failing))
    found = []
    for earlier in reversed(block.statements[: block.index(failing)]):
        if assigned_names(earlier) & wanted:
            wanted -= assigned_names(earlier)
            found.append(earlier)
    return found


def _holding(blamed: _Blamed, line: int) -> set[str]:
    """The names of the function around ``line`` that held the freed graph when the run failed."""
    function = blamed.analysis.function_at(line)
    return {h.expression for h in blamed.held if _function_starting(blamed.analysis, h.function_line) is function}


def _recomputed_before(
    analysis: FileAnalysis, statement: cst.SimpleStatementLine, failing: cst.CSTNode | None, holding: set[str]
) -> tuple[cst.CSTNode | None, tuple[cst.BaseStatement, ...]]:
    """Where to insert, and copies of, ``statement`` and the statements after it, up to the
    failing backward, that compute from what it assigns what that backward reads: the graph built
    again after whatever stepped or freed it in between (SAM's second forward). They go after the
    last statement that backwards, steps or zeroes in between, or just before the failing backward
    when an ``if`` holds it; the ones already after such a statement need no copy. Nothing that
    draws new data (random tensors, the next batch) is copied: the copy must compute the same thing."""
    block = analysis.block_of(statement)
    if failing is None or block is None:
        return None, ()
    container = failing
    while container is not None and all(container is not s for s in block.statements):
        container = analysis.tree.parent(container)
    if container is None:
        return None, ()
    start, end = block.index(statement), block.index(container)
    if start >= end:
        return None, ()
    tainted = set(assigned_names(statement))
    computed = [statement]
    for later in block.statements[start + 1 : end]:
        assigned = assigned_names(later)
        if assigned and read_names(later) & tainted and not analysis.gradient_effects(later):
            tainted |= assigned
            computed.append(later)
    needed = read_names(failing) if container is failing else read_names(container)
    copies: list[cst.BaseStatement] = []
    for candidate in reversed(computed):
        assigned = assigned_names(candidate) & needed
        if assigned:  # the last assignment of a name is the one the backward reads
            needed = (needed - assigned) | read_names(candidate)
            copies.insert(0, candidate)
    if not copies or copies[0] is not statement:
        return None, ()
    between = block.statements[start:end]
    stepped = max((i for i, s in enumerate(between) if _steps_or_frees(analysis, s)), default=None)
    anchor = container
    if stepped is not None:
        anchor = between[stepped + 1] if stepped + 1 < len(between) else container
        copies = [c for c in copies if between.index(c) < stepped]
    inner = analysis.block_of(failing)
    if container is not failing and inner is not None:
        anchor = failing  # inside the `if`, the copies run only when the failing backward does…
        if isinstance(container, cst.If) and any(_updates_weights(analysis, s) for s in between):
            # …before the first statement there that reads what they compute, at the new weights
            # (a loss built there from the stale logits). At the same weights a copy would build
            # again the graph the earlier backward walked: merging the two backwards gives the
            # same gradients without a second forward.
            copied_names = set().union(*(assigned_names(c) for c in copies))
            anchor = next((s for s in inner.statements[: inner.index(failing)] if read_names(s) & copied_names), failing)
    copies = _freed_inputs(analysis, block.statements[:start], between, copies, holding) + copies
    if not copies or any(_draws_data(analysis, c) for c in copies):
        return None, ()
    return anchor, tuple(c.with_changes(leading_lines=[]) for c in copies)


_WEIGHT_UPDATES = GradientEffect.UPDATING & ~GradientEffect.ZERO_GRAD  # (zeroing gradients changes no weight)


def _steps_or_frees(analysis: FileAnalysis, statement: cst.CSTNode) -> bool:
    """Whether ``statement`` changes the weights or frees a graph (zeroing gradients does neither)."""
    return bool(analysis.gradient_effects(statement) & (GradientEffect.BACKWARD | _WEIGHT_UPDATES))


def _updates_weights(analysis: FileAnalysis, statement: cst.CSTNode) -> bool:
    """Whether ``statement`` changes the weights (zeroing gradients does not)."""
    return bool(analysis.gradient_effects(statement) & _WEIGHT_UPDATES)


def _freed_inputs(
    analysis: FileAnalysis,
    before: list[cst.BaseStatement],
    between: list[cst.BaseStatement],
    copies: list[cst.BaseStatement],
    holding: set[str],
) -> list[cst.BaseStatement]:
    """The statements of ``before`` whose graph the copies read after a backward in ``between``
    freed it (a GAN's ``fake = G(z)``, backwarded through by the discriminator's loss): they
    must be computed again too, or the copies build on a freed graph."""
    if not any(GradientEffect.BACKWARD in analysis.gradient_effects(s) for s in between):
        return []
    return _graph_inputs(analysis, before, copies, holding)


def _draws_data(analysis: FileAnalysis, statement: cst.CSTNode) -> bool:
    """Whether running ``statement`` again would draw other data: a random tensor, ``next(...)``."""
    for call in find_nodes(statement, cst.Call):
        name = analysis.names.qualify(call.func) or ""
        if name.rsplit(".", 1)[-1] in _DRAWING_FUNCTIONS or name == "next":
            return True
    return False


_DRAWING_FUNCTIONS = {"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal", "bernoulli", "multinomial", "next"}


def _backward_fixes(analysis: FileAnalysis, failing: cst.CSTNode | None) -> Iterator[Proposal]:
    """Drop one of two backwards of the same tensor (the earlier one, wherever it is, or the
    failing one); or merge the failing backward into the closest earlier one of its block."""
    site = _whole_backward(analysis, failing)
    if site is None:
        return
    line = analysis.line(failing)
    repeated = [analysis.site_of(call) for call in site.value.backwarded if call is not site.call]
    for earlier in repeated:  # a helper or training_step backwarded what it returned
        if earlier.is_whole_statement:
            earlier_line = analysis.line(earlier.statement)
            yield (
                f"drop the earlier backward at line {earlier_line}",
                Fix(safe=False, remove=(earlier.statement,)),
                Kind.DROPS,
                f"no longer adds the gradients of the backward at line {earlier_line}",
            )
    if repeated:
        yield (
            f"drop the repeated backward at line {line}",
            Fix(safe=False, remove=(failing,)),
            Kind.DROPS,
            f"no longer adds the gradients of the backward at line {line}",
        )
    block = analysis.block_of(failing)
    if block is None or site.tensor is None:
        return
    for earlier_statement in reversed(block.statements[: block.index(failing)]):
        if analysis.updates_parameters(earlier_statement):
            return  # an optimizer steps between: merging would change what it steps on
        earlier = _whole_backward(analysis, earlier_statement)
        if earlier is None or earlier.tensor is None:
            continue
        if earlier.tensor.deep_equals(site.tensor):
            if not repeated:
                yield (
                    f"drop the repeated backward at line {line}",
                    Fix(safe=False, remove=(failing,)),
                    Kind.DROPS,
                    f"no longer adds the gradients of the backward at line {line}",
                )
            return
        total = cst.parse_expression(f"{code_of(earlier.tensor)} + {code_of(site.tensor)}")
        merged = earlier_statement.with_changes(body=[cst.Expr(earlier.with_tensor(total))])
        earlier_line = analysis.line(earlier_statement)
        yield (
            f"merge the backward at line {line} into the one at line {earlier_line}",
            Fix(safe=False, replace=((earlier_statement, merged),), remove=(failing,)),
            Kind.MERGES,
            f"backwards the losses of lines {earlier_line} and {line} together",
        )
        return


def _detached_where_stored(analysis: FileAnalysis, statement: cst.SimpleStatementLine) -> cst.SimpleStatementLine | None:
    """The blamed statement with what it stores detached; not for what the analysis knows holds
    no graph (a module, an object)."""
    small = statement.body[0] if len(statement.body) == 1 else None
    if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
        value = analysis.value_assigned(small.value)
        if value is not None and not value.graph:
            return None
    return detached_where_stored(statement)


def _run_bounded(runner: ScriptRunner, script: Path, options: RunOptions, deadline: float) -> RunResult | None:
    remaining = deadline - time.monotonic()
    if remaining < 1:
        return None
    timeout = min(options.timeout, remaining)
    stop_after = min(options.stop_after, timeout * 0.9) if options.stop_after is not None else None
    return runner.run(script, replace(options, timeout=timeout, stop_after=stop_after))
