"""Execution-guided repair: when no rule can prove a rewrite, try the few rewrites the bug family
allows at the lines the failing run blamed, run each, and keep the one the run proves.

The diagnosis names two places: the backward that failed, and the forward lines (the whole stack)
that built the graph it found freed. The candidates come from the vocabulary the rules use:

* detach the value where it is stored (the blamed assignment or ``append``);
* build it under ``torch.no_grad()``;
* detach it where the loop around the failing backward starts (it is carried into the iteration);
* compute it again in that loop (move the blamed statement to the top of the loop), or again just
  before the failing backward (copy it, and what is computed from it, after whatever stepped);
* drop one of two backwards of the same tensor (a helper or ``training_step`` that backwarded what
  it returned), or merge the failing backward into the earlier one of the same step.

Never ``retain_graph=True``. Each candidate runs in place of the file it rewrites, served from
memory (nothing is written beside the script), under the diagnosis's bounds with gradients recorded.
The original also runs once with ``retain_graph=True``: that run is the reference, compared over the
optimizer steps both runs reached. A candidate is accepted when it runs clean and every tensor that
gets a gradient in the reference still gets one (detaching a value that must train runs clean too).
It is *safe* when its gradients equal the reference's (to the verify tolerance): the maths is what
the author wrote; any other accepted candidate changes the maths and is written only with
``--unsafe-fixes``. A merge is accepted only when safe. Without a reference (the original fails even
with ``retain_graph=True``, e.g. an optimizer changed the weights in place between the backwards)
only a rewrite that keeps every graph can be accepted: computing again, or dropping a repeated
backward of the same tensor; a detach that cannot be judged is refused.
Among accepted candidates the safe ones come first, then the smallest edit.
"""

from __future__ import annotations

import contextlib
import difflib
import enum
import os
import queue
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator

import libcst as cst

from ..analysis import (
    TENSOR,
    FileAnalysis,
    assigned_names,
    code_of,
    detached_where_stored,
    find_nodes,
    is_single_call,
    method_called,
    read_names,
)
from ..edits import Fix, apply_fixes
from ..checker import parse_source
from ..engine import SourceError, write_atomically
from .diagnose import Diagnosis
from .runner import RunOptions, RunResult, ScriptRunner
from .verify import compare_gradients


class Kind(enum.Enum):
    """How a rewrite treats the graphs, which decides what a run must show to accept it."""

    CUTS = "cuts a graph"  # detach, no_grad: accepted only if the gradients show nothing is lost
    KEEPS = "keeps every graph"  # computes again, drops a repeated backward of the same tensor
    MERGES = "merges backwards"  # only the same gradients will do


@dataclass(frozen=True)
class Candidate:
    description: str  # what the rewrite does, and where
    source: bytes
    kind: Kind
    module: Path | None = None  # the module beside the script it rewrites; None: the script
    module_original: bytes = b""  # that module as it was read

    def changed_lines(self, original: bytes) -> int:
        """Lines changed from ``original`` (the script), or from the module it rewrites."""
        original = self.module_original if self.module is not None else original
        before, after = (text.decode(errors="replace").splitlines() for text in (original, self.source))
        diff = difflib.unified_diff(before, after, n=0, lineterm="")
        return sum(1 for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---")))


@dataclass
class Attempt:
    candidate: Candidate
    run: RunResult | None  # None when the time budget ran out before it could run
    compared: bool = False  # there was a retain_graph=True run to compare gradients with
    gradient_difference: str | None = None  # what differs from it, over the steps both reached
    loses_gradients: bool = False  # some tensor that got a gradient there gets none here

    @property
    def accepted(self) -> bool:
        if self.run is None or not self.run.succeeded or self.loses_gradients:
            return False
        if not self.compared:
            return self.candidate.kind is Kind.KEEPS
        return self.safe or self.candidate.kind is not Kind.MERGES

    @property
    def safe(self) -> bool:
        return self.run is not None and self.run.succeeded and self.compared and self.gradient_difference is None

    def outcome(self) -> str:
        if self.run is None:
            return "not run: the time budget was spent"
        if not self.run.succeeded:
            return self.run.describe().split(". ")[0]
        if not self.compared:
            if self.candidate.kind is Kind.KEEPS:
                return "runs clean; it keeps every graph (no retain_graph=True run to compare gradients with)"
            return f"runs, but it {self.candidate.kind.value} and there is no retain_graph=True run to show no gradient is lost"
        if self.gradient_difference is None:
            return "runs clean; gradients equal the retain_graph=True run"
        if self.loses_gradients:
            return f"runs, but loses gradients the original computes ({self.gradient_difference})"
        if self.candidate.kind is Kind.MERGES:
            return f"runs, but a merge must keep the gradients ({self.gradient_difference})"
        return f"runs clean; the maths changes ({self.gradient_difference})"


@dataclass
class Repair:
    original: bytes
    attempts: list[Attempt] = field(default_factory=list)
    reference: RunResult | None = None  # the original with retain_graph=True, gradients recorded

    @property
    def chosen(self) -> Attempt | None:
        accepted = [a for a in self.attempts if a.accepted]
        return min(accepted, key=lambda a: (not a.safe, a.candidate.changed_lines(self.original)), default=None)

    def why(self) -> str:
        chosen = self.chosen
        if chosen is None:
            return "no candidate rewrite ran clean"
        if chosen.safe:
            return "it runs clean and its gradients equal those of the original run with retain_graph=True"
        if not chosen.compared:
            return (
                "it runs clean and keeps every graph; the original does not run even with "
                "retain_graph=True, so gradients were not compared and the maths may change"
            )
        return "it runs clean and keeps every gradient, but their values differ from the retain_graph=True run: the maths changes"


def write_chosen(searched: Repair, script: Path) -> None:
    """Write the chosen rewrite over ``script`` (or the module beside it that it rewrites)
    atomically, only if the file is still what the search read (``engine.FileChanged`` otherwise)."""
    candidate = searched.chosen.candidate
    if candidate.module is not None:
        write_atomically(candidate.module, candidate.source, expected=candidate.module_original)
    else:
        write_atomically(script, candidate.source, expected=searched.original)


def repair(
    diagnosis: Diagnosis, runner: ScriptRunner, options: RunOptions, budget: float = 120.0, jobs: int = 1
) -> Repair:
    """Search the candidate rewrites for ``diagnosis`` (a second-backward error) within ``budget``
    seconds in all; each run keeps the bounds of ``options``. With ``jobs`` above 1, that many
    runs go at once, the others on twins of ``runner`` (forked, so warm at once), closed when
    the search ends."""
    deadline = time.monotonic() + budget
    script = diagnosis.script
    result = Repair(diagnosis.source)
    recording = replace(options, detect_anomaly=False, measure_graphs=False, count_lines=(), record_gradients=True)
    if jobs > 1:
        recording = replace(recording, threads=max(1, (os.cpu_count() or 1) // jobs))
    found = candidates(diagnosis)
    with contextlib.ExitStack() as extra_runners:
        idle: queue.SimpleQueue[ScriptRunner] = queue.SimpleQueue()
        idle.put(runner)
        for _ in range(min(jobs, len(found) + 1) - 1):
            idle.put(extra_runners.enter_context(runner.twin()))

        def run(candidate: Candidate | None) -> RunResult | None:
            free = idle.get()
            try:
                if candidate is None:  # the original, keeping every graph: the reference
                    return _run_bounded(free, script, replace(recording, retain_graph=True), deadline)
                return _run_candidate(free, script, candidate, recording, deadline)
            finally:
                idle.put(free)

        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            result.reference, *runs = pool.map(run, [None, *found])
    reference = result.reference if result.reference and result.reference.succeeded else None
    reference_gradients = _compared_gradients(reference, reference) if reference else None
    for candidate, run in zip(found, runs):
        attempt = Attempt(candidate, run)
        if run is not None and run.succeeded and reference_gradients:
            # A step bound counts backward calls: runs that backward more or less often per step
            # reach different steps, so compare the steps both reached.
            gradients = _compared_gradients(run, reference)
            common = min(len(reference_gradients), len(gradients))
            expected, actual = reference_gradients[:common], gradients[:common]
            attempt.compared = True
            attempt.gradient_difference = compare_gradients(expected, actual) if common else "no optimizer step recorded"
            attempt.loses_gradients = not common or _shapes(actual) != _shapes(expected)
        result.attempts.append(attempt)
    return result


def _compared_gradients(run: RunResult, reference: RunResult) -> list[tuple[str, list[float]]]:
    """The gradients of ``run`` that are compared with the reference run's: at each optimizer
    step; without an optimizer, after each backward, of the tensors the reference run updated
    (a gradient nothing applies is not one the rewrite must keep)."""
    if reference.gradients:
        return run.gradients
    updated = reference.updated_leaves
    return [(label, values) for label, values in run.backward_gradients if label.split(": ", 1)[1] in updated]


def _shapes(gradients: list[tuple[str, list[float]]]) -> list[tuple[str, int]]:
    """Which tensors got gradients at each optimizer step, and how many values each."""
    return [(label, len(values)) for label, values in gradients]


def candidates(diagnosis: Diagnosis) -> list[Candidate]:
    """Every distinct rewrite of the vocabulary at the places the run blamed, in order: in the
    script, then in the modules beside it where the freed graph was built."""
    found = _rewrites(diagnosis.analysis, _fixes(diagnosis.analysis, diagnosis))
    for path, analysis in _blamed_modules(diagnosis):
        fixes = _module_fixes(analysis, path, [f.line for f in diagnosis.run.forward_frames if f.path == str(path)])
        found += [
            Candidate(c.description, c.source, c.kind, path, analysis.module.bytes) for c in _rewrites(analysis, fixes)
        ]
    return found


def _rewrites(analysis: FileAnalysis, fixes: Iterator[tuple[str, Fix, Kind]]) -> list[Candidate]:
    found: dict[bytes, Candidate] = {}
    for description, fix, kind in fixes:
        if any(analysis.updates_parameters(s) for s in fix.taken_away()):
            continue  # never remove or move an optimizer update
        try:
            source = apply_fixes(analysis.module, [fix]).bytes
            cst.parse_module(source)
        except (cst.CSTValidationError, cst.ParserSyntaxError):
            continue  # a rewrite that is not valid Python is not a candidate
        if source != analysis.module.bytes and source not in found:
            found[source] = Candidate(description, source, kind)
    return list(found.values())


def _blamed_modules(diagnosis: Diagnosis) -> Iterator[tuple[Path, FileAnalysis]]:
    """The modules beside the script where the run saw the freed graph built, analysed."""
    for name in dict.fromkeys(f.path for f in reversed(diagnosis.run.forward_frames) if f.path):
        path = Path(name)
        try:
            yield path, FileAnalysis(parse_source(path.read_bytes(), name))
        except (OSError, SourceError):
            continue  # a module that cannot be read or parsed gets no candidate


def _module_fixes(analysis: FileAnalysis, path: Path, lines: list[int]) -> Iterator[tuple[str, Fix, Kind]]:
    """Detach, or build under no_grad, what the blamed lines of a module store."""
    for line in dict.fromkeys(reversed(lines)):  # innermost first
        statement = analysis.statement_at(line)
        if isinstance(statement, cst.SimpleStatementLine):
            # What the module's own analysis cannot tell (a parameter's value), the run has shown:
            # a graph was built here.
            yield from _cutting_fixes(analysis, statement, detached_where_stored(statement), f"{path.name} line {line}")


def _fixes(analysis: FileAnalysis, diagnosis: Diagnosis) -> Iterator[tuple[str, Fix, Kind]]:
    failing = analysis.statement_at(diagnosis.failing.line) if diagnosis.failing else None
    loop = next((l for l in analysis.loops_around(failing) if not l.is_call), None) if failing else None
    blamed: list[cst.SimpleStatementLine] = []
    # Innermost first. A framework may swallow anomaly mode's forward trace (Lightning does): then
    # the statements that last assigned what the failing backward reads stand in for it.
    lines = [frame.line for frame in reversed(diagnosis.run.forward_frames)]
    if not lines and failing is not None:
        lines = [analysis.line(s) for s in _last_assignments(analysis, failing)]
    for line in lines:
        statement = analysis.statement_at(line)
        if statement is not None and statement is not failing and all(statement is not b for b in blamed):
            blamed.append(statement)
    for statement in blamed:
        line = analysis.line(statement)
        yield from _cutting_fixes(analysis, statement, _detached_where_stored(analysis, statement), f"line {line}")
        anchor, recomputed = _recomputed_before(analysis, statement, failing)
        if recomputed:
            yield (
                f"compute line {line} again before the backward at line {analysis.line(failing)}",
                Fix(safe=False, insert_before=((anchor, recomputed),)),
                Kind.KEEPS,
            )
        if loop is None or not isinstance(loop.node.body, cst.IndentedBlock):
            continue
        first = loop.node.body.body[0]
        entering = loop.entry  # what the names hold when the loop starts
        names = sorted(
            n
            for n in assigned_names(statement) & read_names(loop.node.body)
            if n in entering and (entering[n].graph or entering[n].structure is TENSOR)
        )
        if names and first is not statement:
            resets = tuple(cst.parse_statement(f"{n} = {n}.detach()") for n in names)
            yield (
                f"detach {', '.join(names)} where the loop at line {analysis.line(loop.node)} starts",
                Fix(safe=False, insert_before=((first, resets),)),
                Kind.CUTS,
            )
        carried = sorted(
            n
            for n in assigned_names(statement, rebinding_only=True) & read_names(statement)
            if "." not in n and n in entering and entering[n].structure is not TENSOR
        )
        if carried and analysis.contains(loop.node, statement):
            # A structure of the user's own (a NamedTuple state): rebuilt from its detached parts.
            parts = tuple(cst.parse_statement(f"{n} = type({n})(*(part.detach() for part in {n}))") for n in carried)
            yield f"detach the parts of {', '.join(carried)} after line {line} stores it", Fix(safe=False, insert_after=((statement, parts),)), Kind.CUTS
        same_function = analysis.function_at(line) is analysis.function_at(analysis.line(loop.node))
        if not analysis.contains(loop.node, statement) and same_function:
            yield (
                f"compute line {line} again in the loop at line {analysis.line(loop.node)}",
                Fix(safe=False, move=((statement, first),)),
                Kind.KEEPS,
            )
    if loop is not None:
        yield from _reset_every_iteration(analysis, loop.node)
    yield from _backward_fixes(analysis, failing)


def _reset_every_iteration(analysis: FileAnalysis, loop: cst.CSTNode) -> Iterator[tuple[str, Fix, Kind]]:
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
            )


def _clears(statement: cst.BaseStatement) -> bool:
    """Whether ``statement`` is ``x.clear()``."""
    return is_single_call(statement) and method_called(call := statement.body[0].value) == "clear" and not call.args


def _cutting_fixes(
    analysis: FileAnalysis, statement: cst.SimpleStatementLine, stored: cst.SimpleStatementLine | None, place: str
) -> Iterator[tuple[str, Fix, Kind]]:
    """Replace ``statement`` by ``stored`` (it, detaching what it stores); build it under
    ``torch.no_grad()``."""
    if stored is not None:
        yield f"detach the value where it is stored ({place})", Fix(safe=False, replace=((statement, stored),)), Kind.CUTS
    torch = next((alias for alias, name in analysis.names.aliases.items() if name == "torch"), None)
    if torch is not None:
        guarded = cst.With(
            items=[cst.WithItem(cst.parse_expression(f"{torch}.no_grad()"))],
            body=cst.IndentedBlock([statement.with_changes(leading_lines=[])]),
            leading_lines=statement.leading_lines,
        )
        yield f"build {place} under {torch}.no_grad()", Fix(safe=False, replace=((statement, guarded),)), Kind.CUTS


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


def _recomputed_before(
    analysis: FileAnalysis, statement: cst.SimpleStatementLine, failing: cst.CSTNode | None
) -> tuple[cst.CSTNode | None, tuple[cst.BaseStatement, ...]]:
    """Where to insert, and copies of, ``statement`` and the statements after it, up to the
    failing backward in the same block, that compute from what it assigns what that backward
    reads: the graph built again after whatever stepped or freed it in between (SAM's second
    forward). They go after the last statement that backwards, steps or zeroes in between; the
    ones already after it need no copy. Nothing that draws new data (random tensors, the next
    batch) is copied: the copy must compute the same thing."""
    block = analysis.block_of(statement)
    if failing is None or block is None or all(failing is not s for s in block.statements):
        return None, ()
    start, end = block.index(statement), block.index(failing)
    if start >= end:
        return None, ()
    tainted = set(assigned_names(statement))
    computed = [statement]
    for later in block.statements[start + 1 : end]:
        assigned = assigned_names(later)
        if assigned and read_names(later) & tainted and not analysis.gradient_effects(later):
            tainted |= assigned
            computed.append(later)
    needed = read_names(failing)
    copies: list[cst.BaseStatement] = []
    for candidate in reversed(computed):
        if assigned_names(candidate) & needed:
            needed |= read_names(candidate)
            copies.insert(0, candidate)
    if not copies or copies[0] is not statement:
        return None, ()
    between = block.statements[start:end]
    stepped = max((i for i, s in enumerate(between) if analysis.gradient_effects(s)), default=None)
    anchor = failing
    if stepped is not None:
        anchor = between[stepped + 1] if stepped + 1 < len(between) else failing
        copies = [c for c in copies if between.index(c) < stepped]
    copies = _freed_inputs(analysis, block.statements[:start], between, copies) + copies
    if not copies or any(_draws_data(analysis, c) for c in copies):
        return None, ()
    return anchor, tuple(c.with_changes(leading_lines=[]) for c in copies)


def _freed_inputs(
    analysis: FileAnalysis, before: list[cst.BaseStatement], between: list[cst.BaseStatement], copies: list[cst.BaseStatement]
) -> list[cst.BaseStatement]:
    """The statements of ``before`` whose graph the copies read after a backward in ``between``
    freed it (a GAN's ``fake = G(z)``, backwarded through by the discriminator's loss): they
    must be computed again too, or the copies build on a freed graph."""
    if not any("backward" in analysis.gradient_effects(s) for s in between):
        return []
    needed = set().union(*(read_names(c) for c in copies)) - set().union(*(assigned_names(c) for c in copies))
    found: list[cst.BaseStatement] = []
    for earlier in reversed(before):
        assigned = assigned_names(earlier) & needed
        if not assigned or not isinstance(earlier, cst.SimpleStatementLine) or len(earlier.body) != 1:
            continue
        small = earlier.body[0]
        value = analysis.value_assigned(small.value) if isinstance(small, cst.Assign) else None
        if value is None or not value.graph:
            break  # what the copies need is not a graph this step built: nothing more to compute again
        needed = (needed - assigned) | read_names(earlier)
        found.insert(0, earlier)
    return found


def _draws_data(analysis: FileAnalysis, statement: cst.CSTNode) -> bool:
    """Whether running ``statement`` again would draw other data: a random tensor, ``next(...)``."""
    for call in find_nodes(statement, cst.Call):
        name = analysis.names.qualify(call.func) or ""
        if name.rsplit(".", 1)[-1] in _DRAWING_FUNCTIONS or name == "next":
            return True
    return False


_DRAWING_FUNCTIONS = {"rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "normal", "bernoulli", "multinomial", "next"}


def _backward_fixes(analysis: FileAnalysis, failing: cst.CSTNode | None) -> Iterator[tuple[str, Fix, Kind]]:
    """Drop one of two backwards of the same tensor (the earlier one, wherever it is, or the
    failing one); or merge the failing backward into the closest earlier one of its block."""
    site = next((s for s in analysis.backward_sites if s.statement is failing and s.is_whole_statement), None)
    if site is None:
        return
    line = analysis.line(failing)
    repeated = [analysis.site_of(call) for call in site.value.backwarded if call is not site.call]
    for earlier in repeated:  # a helper or training_step backwarded what it returned
        if earlier.is_whole_statement:
            yield f"drop the earlier backward at line {analysis.line(earlier.statement)}", Fix(safe=False, remove=(earlier.statement,)), Kind.KEEPS
    if repeated:
        yield f"drop the repeated backward at line {line}", Fix(safe=False, remove=(failing,)), Kind.KEEPS
    block = analysis.block_of(failing)
    if block is None or site.tensor is None:
        return
    for earlier_statement in reversed(block.statements[: block.index(failing)]):
        if analysis.updates_parameters(earlier_statement):
            return  # an optimizer steps between: merging would change what it steps on
        earlier = next((s for s in analysis.backward_sites if s.statement is earlier_statement and s.is_whole_statement), None)
        if earlier is None or earlier.tensor is None:
            continue
        if earlier.tensor.deep_equals(site.tensor):
            if not repeated:
                yield f"drop the repeated backward at line {line}", Fix(safe=False, remove=(failing,)), Kind.KEEPS
            return
        total = cst.parse_expression(f"{code_of(earlier.tensor)} + {code_of(site.tensor)}")
        merged = earlier_statement.with_changes(body=[cst.Expr(earlier.with_tensor(total))])
        yield (
            f"merge the backward at line {line} into the one at line {analysis.line(earlier_statement)}",
            Fix(safe=False, replace=((earlier_statement, merged),), remove=(failing,)),
            Kind.MERGES,
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
    return runner.run(script, replace(options, timeout=min(options.timeout, remaining)))


def _run_candidate(
    runner: ScriptRunner, script: Path, candidate: Candidate, options: RunOptions, deadline: float
) -> RunResult | None:
    """Run the script with ``candidate`` in place of the file it rewrites (the script or a module
    beside it); the runner serves the rewrite from memory, so nothing is written beside the script."""
    rewritten = candidate.module if candidate.module is not None else script
    return _run_bounded(runner, script, replace(options, sources=((str(rewritten), candidate.source),)), deadline)
