"""Diagnosing a user's training script: run it a few steps with anomaly detection, and when the
"backward through the graph a second time" error happens, say where and why, and which rule fixes it.

The run gives two lines: the ``.backward()`` that failed (from the error's traceback, with how many
times that line had run) and the line that built the graph that was already freed (from anomaly
mode's traceback of the forward call). The static analysis of the same file tells how they relate.

Silent bugs raise nothing, so a run that does not fail is measured: how often a backward placed
after a loop ran against the loop's iterations (fewer: only the last batch trains, GF008), and, in
a second run, the graph nodes that live tensors keep at each optimizer step (growing: losses kept
for logging, GF007).
"""

from __future__ import annotations

import contextlib
import os
import re
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator

import libcst as cst

from ..analysis import FileAnalysis, code_of, is_name, method_called
from ..analysis import APPENDING_METHODS
from ..check import check_source, find_violations
from ..files import unified_diff, write_atomically
from ..parse import parse_source
from ..report import FileReport, FixMode, SourceError
from ..notebook import Notebook
from ..registry import all_rules, rule_by_code
from ..rule import Finding, FixKind, Rule
from ..symptoms import GraphsKeptAlive, LastBatchOnly
from .runner import COMPARED_STEPS, MEASURED_STEPS, Frame, RunBeside, RunOptions, RunResult, ScriptRunner

SECOND_BACKWARD = "Trying to backward through the graph a second time"


@dataclass
class Diagnosis:
    script: Path
    source: bytes  # the script as it was read and analysed
    analysis: FileAnalysis
    run: RunResult
    failing: Frame | None = None  # the script's innermost frame of the backward call that raised
    failing_call_number: int = 0  # how many times that line had called backward, the failing call included
    loop_line: int | None = None  # the innermost loop around the failing backward
    graph: Frame | None = None  # where the freed graph was built
    relation: str = ""  # how the two lines relate, in plain words
    kept_in: str = ""  # where the line that built the freed graph stores it, in plain words
    finding: Finding | None = None  # the rule's finding that matches
    fix: FileReport | None = None  # that rule's rewrite of the script, when it has one
    fix_refused: str = ""  # why that rule's (unsafe) rewrite is not offered: what it stops training
    fix_run: RunResult | None = None  # the run of that rewrite (from memory) tried before it was offered
    symptom: str = ""  # what the run measured of a silent bug (no error raised)
    notebook: Notebook | None = None  # when ``script`` runs a notebook's code cells
    # The module beside the script where the backward failed and the freed graph was built, and
    # its code: the lines, the loop, the relation and the rule are that module's.
    module: Path | None = None
    module_source: bytes = b""
    # The run with retain_graph=True that a repair search compares candidates with, started beside
    # the traced run; None when no search follows.
    reference: RunBeside | None = None
    # Rewrites of the script by the rules of its findings, by rule code and mode, made before the
    # run while the server was still starting: the one the run matches is not waited for after it.
    rewrites_ahead: dict[tuple[str, FixMode], FileReport] = field(default_factory=dict)

    def describe(self, text: str) -> str:
        """``text`` with its ``line N`` as users find them: in a notebook, ``cell C, line L``; a
        line of an explanation resolved in a module (``line N`` alone), with the module's name."""
        if self.module is not None:  # (the explanation's sentences name the module's lines already)
            return f"{self.module.name} {text}" if re.fullmatch(r"line \d+", text) else text
        return text if self.notebook is None else self.notebook.describe(text)

    def diff(self, rewritten: bytes) -> str:
        """The diff from the script as read to ``rewritten``: of the notebook's cells for a notebook;
        of the module for the rule's rewrite of a module."""
        if self.fix is not None and self.module is not None and rewritten == self.fix.rewritten:
            return unified_diff(self.fix)
        if self.notebook is None:
            return unified_diff(FileReport(str(self.script), original=self.source, rewritten=rewritten))
        return self.notebook.cell_diffs(self.notebook.with_source(rewritten), self.notebook.path.lstrip("/"))

    @property
    def second_backward(self) -> bool:
        return self.run.status == "error" and SECOND_BACKWARD in self.run.error_message

    @property
    def found(self) -> bool:
        """Whether the run showed a bug: the error, or a silent bug's symptom."""
        return self.second_backward or bool(self.symptom)

    def confirmed_by(self, again: RunResult) -> tuple[bool, str]:
        """Whether a run of the fixed script is free of what this diagnosis found, and still gives
        a gradient to every parameter the original trained."""
        if self.symptom and self.rule is not None:
            return self.rule.SYMPTOM.gone(self.run, again)
        if not again.succeeded:
            return False, again.describe()
        lost = gradients_lost(self.run, again)
        if lost:
            return False, f"it runs, but {lost}, which the original computes"
        ran = f"{again.optimizer_steps} optimizer step(s)" if again.optimizer_steps else f"{again.backward_calls} backward call(s)"
        return True, f"{ran} now run without error ({again.describe()})"

    @property
    def rule(self) -> type[Rule] | None:
        return rule_by_code(self.finding.code) if self.finding else None


@contextlib.contextmanager
def notebook_as_script(path: Path) -> Iterator[tuple[Path, Notebook]]:
    """A notebook's code cells as a script beside it (relative paths and sibling imports work the
    same), for ``diagnose`` and its fixes to run and rewrite; what they write to the script goes
    back into the notebook's cells when the block ends, if the notebook is still as it was read.
    Raises ``NotebookError`` for a file that is not a notebook."""
    original = path.read_bytes()
    notebook = Notebook(original, str(path))
    script = path.with_name(f".{path.stem}.gradfix-notebook.py")
    script.write_bytes(notebook.source)
    try:
        yield script, notebook
    finally:
        # The block may end by an exception that carries its exit code: a fix written is kept anyway.
        rewritten = script.read_bytes()
        script.unlink(missing_ok=True)
        if rewritten != notebook.source:
            write_atomically(path, notebook.with_source(rewritten), expected=original)


def diagnose(script: Path, runner: ScriptRunner, options: RunOptions, notebook: Notebook | None = None) -> Diagnosis:
    """Run ``script`` with anomaly detection within ``options``' bounds, and explain its failure or
    the silent bug it shows. Raises ``SourceError`` before running anything when the script cannot
    be parsed, and after a run during which the script was edited. ``notebook`` is the notebook
    ``script`` was made from, if any."""
    source = script.read_bytes()
    module = parse_source(source, str(script))
    # A repair search compares its candidates with the script run keeping every graph: started
    # now, beside the traced run (on half the cores each), it is there when the search starts;
    # stopped as soon as no search will follow. Its start starts the warm server too, whose
    # import of torch (seconds) goes on while the script is analysed.
    beside = replace(reference_options(options, COMPARED_STEPS), threads=max(1, (os.cpu_count() or 1) // 2))
    starting = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradfix-reference")
    started = starting.submit(RunBeside, runner, script, beside)
    starting.shutdown(wait=False)
    try:
        analysis = FileAnalysis(module)
        findings = [replace(v.finding, path=str(script)) for v in find_violations(analysis, all_rules())]
        last_batch = [f for f in findings if isinstance(rule_by_code(f.code).SYMPTOM, LastBatchOnly)]
        counted = {line for f in last_batch for line in (f.line, *_loop_body_lines(analysis, f))}
        # Gradients recorded: the steps it completes before failing are what a repair must keep.
        traced = replace(options, detect_anomaly=True, count_lines=tuple(sorted(counted)), record_gradients=True, recorded_steps=COMPARED_STEPS)
        rewrites = _rewrites_while_starting(source, script, findings, started)
        reference = started.result()  # the server takes one request at a time: the twin's, then the traced run's
        run = runner.run(script, traced)
        diagnosis = Diagnosis(script, source, analysis, run, notebook=notebook, reference=reference, rewrites_ahead=rewrites)
        if not diagnosis.second_backward:
            reference.stop()
        _refuse_if_changed(script, source)
        _explain(diagnosis, runner, options, findings, last_batch)
    except BaseException:
        _stop_once_started(started)
        raise
    if diagnosis.fix is not None or not diagnosis.second_backward:
        diagnosis.reference = None
        reference.stop()
    return diagnosis


def _rewrites_while_starting(source: bytes, script: Path, findings: list[Finding], started: Future) -> dict[tuple[str, FixMode], FileReport]:
    """The script's rewrites by the rules of ``findings`` that have a fix, made while the run beside
    starts (its server imports torch for seconds, on another core), each as ``rule_fix`` makes it;
    none is begun once the run beside has started, when the traced run can."""
    made: dict[tuple[str, FixMode], FileReport] = {}
    for finding in sorted(findings, key=_fixable_first):
        if finding.fix is None or started.done():
            break
        key = (finding.code, _fix_mode(finding))
        if key not in made:
            made[key] = check_source(source, [rule_by_code(finding.code)], key[1], str(script))
    return made


def _stop_once_started(started: Future) -> None:
    """Stop the run beside as soon as it has started (at once if it has), without waiting for it:
    gradfix is leaving on an error or a signal."""

    def stop(start: Future) -> None:
        if start.exception() is None:
            start.result().stop(wait=False)

    started.add_done_callback(stop)


def recording_options(options: RunOptions) -> RunOptions:
    """``options`` for a run that records the gradients of the steps compared, and traces nothing
    else (what a repair compares candidates by)."""
    return replace(options, detect_anomaly=False, measure_graphs=False, count_lines=(), record_gradients=True, recorded_steps=COMPARED_STEPS)


def reference_options(options: RunOptions, backward_calls: int) -> RunOptions:
    """The bounds of the run with retain_graph=True that a repair compares candidates with, for a
    script whose traced run made ``backward_calls`` backward calls before it failed: the steps
    compared, and, forced to keep every graph (a long run slows down), a few times those calls."""
    return replace(recording_options(options), retain_graph=True, max_optimizer_steps=COMPARED_STEPS, max_steps=4 * (backward_calls + 1))


def _explain(diagnosis: Diagnosis, runner: ScriptRunner, options: RunOptions, findings: list[Finding], last_batch: list[Finding]) -> None:
    """What the traced run shows: the error explained, or a silent bug measured; the matching
    rule's rewrite, tried first when it is unsafe."""
    script, source, analysis, run = diagnosis.script, diagnosis.source, diagnosis.analysis, diagnosis.run
    if diagnosis.second_backward:
        _explain_error(analysis, findings, diagnosis)
    elif run.succeeded:
        # Counting live graph nodes scans the heap at every step: only a run that did not fail
        # can show a silent bug, so only then is it run again, measured, for the steps counted.
        steps = min(options.max_optimizer_steps or MEASURED_STEPS, MEASURED_STEPS)
        measured = runner.run(script, replace(options, measure_graphs=True, max_optimizer_steps=steps))
        _refuse_if_changed(script, source)
        diagnosis.run = replace(run, live_graph_nodes=measured.live_graph_nodes) if measured.succeeded else run
        _measure_silent_bugs(analysis, findings, last_batch, diagnosis)
    diagnosis.fix = rule_fix(diagnosis)
    if diagnosis.fix is not None and diagnosis.finding.fix is FixKind.UNSAFE and diagnosis.second_backward:
        # An unsafe rewrite is tried first: one that stops a parameter training is no fix to
        # write (the search looks for another, and says why each is refused).
        # Run as ``fix_and_rerun`` would run it once written, so that run is this one.
        rewritten = ((diagnosis.fix.path, diagnosis.fix.rewritten),)
        trial = runner.run(script, replace(_confirming_options(diagnosis, options), sources=rewritten))
        lost = gradients_lost(run, trial) if trial.succeeded else ""
        if lost:
            diagnosis.fix, diagnosis.fix_refused = None, f"{diagnosis.finding.code}'s unsafe fix runs, but {lost}"
        else:
            diagnosis.fix_run = trial


def rule_fix(diagnosis: Diagnosis) -> FileReport | None:
    """The matching rule's rewrite of the file its finding is in (the script, or the module the
    explanation was resolved in), when it has one."""
    if diagnosis.finding is None or diagnosis.finding.fix is None:
        return None
    mode = _fix_mode(diagnosis.finding)
    if diagnosis.module is not None:
        report = check_source(diagnosis.module_source, [diagnosis.rule], mode, str(diagnosis.module))
    else:
        made = diagnosis.rewrites_ahead.get((diagnosis.finding.code, mode))
        report = made or check_source(diagnosis.source, [diagnosis.rule], mode, str(diagnosis.script))
    return report if report.changed else None


def _fix_mode(finding: Finding) -> FixMode:
    """The mode in which the finding's rule makes the finding's fix."""
    return FixMode.UNSAFE if finding.fix is FixKind.UNSAFE else FixMode.SAFE


def _refuse_if_changed(script: Path, source: bytes) -> None:
    """Raise ``SourceError`` when ``script`` no longer holds ``source``: the run's lines would be
    matched to the lines of code that is not what ran."""
    try:
        unchanged = script.read_bytes() == source
    except OSError:  # removed meanwhile
        unchanged = False
    if not unchanged:
        raise SourceError(f"{script}: changed while gradfix ran it; run diagnose again")


def _explain_error(analysis: FileAnalysis, findings: list[Finding], diagnosis: Diagnosis) -> None:
    run = diagnosis.run
    script_analysis = analysis
    # Where the backward failed, and where the graph it needed was built (when anomaly mode told):
    # when both are in one module beside the script, its lines, loops and rules explain the error.
    module = _module_of_failure(run)
    if module is not None:
        try:
            diagnosis.module_source = module.read_bytes()
            analysis = FileAnalysis(parse_source(diagnosis.module_source, str(module)))
        except (OSError, SourceError):
            module = None
        else:
            diagnosis.module = module
            findings = [_named_in(replace(v.finding, path=str(module)), module) for v in find_violations(analysis, all_rules())]
    path = str(module) if module is not None else ""
    diagnosis.failing = next((f for f in reversed(run.failing_frames) if f.path == path), None)
    diagnosis.graph = next((f for f in reversed(run.forward_frames) if f.path == path), None)
    if diagnosis.failing is not None:
        # The calls of the line that made the failing call, not of a line that called into it.
        innermost = run.failing_frames[-1]
        diagnosis.failing_call_number = run.backward_calls_by_line.get((innermost.path, innermost.line), 1)
        loops = [loop for loop in analysis.loops_around(analysis.statement_at(diagnosis.failing.line)) if not loop.is_call]
        diagnosis.loop_line = analysis.line(loops[0].node) if loops else None
    diagnosis.relation = _relation(analysis, diagnosis)
    # Innermost first: a helper's `return` stores nothing; the caller's line that keeps it does.
    diagnosis.kept_in = next(filter(None, (_where_kept(script_analysis, frame) for frame in reversed(run.forward_frames))), "")
    diagnosis.finding = _matching_finding(analysis, findings, diagnosis)


def _module_of_failure(run: RunResult) -> Path | None:
    """The module beside the script where the failing backward was called, if the freed graph
    was built there too (or anomaly mode did not tell where)."""
    innermost = run.failing_frames[-1] if run.failing_frames else None
    if innermost is None or not innermost.path:
        return None
    built = run.forward_frames[-1].path if run.forward_frames else innermost.path
    return Path(innermost.path) if built == innermost.path else None


def _named_in(finding: Finding, module: Path) -> Finding:
    """A finding in a module, its lines named with the module's name."""
    return replace(finding, message=re.sub(r"(?<!\.py )\bline (\d+)", rf"{module.name} line \1", finding.message))


def _measure_silent_bugs(analysis: FileAnalysis, findings: list[Finding], last_batch: list[Finding], diagnosis: Diagnosis) -> None:
    """A run without error: graphs that grow step after step, or a backward that ran fewer times
    than the loop before it, each matched to the rule that finds its cause."""
    run = diagnosis.run
    grows, _ = GraphsKeptAlive().shown_by(run)
    kept = [f for f in findings if isinstance(rule_by_code(f.code).SYMPTOM, GraphsKeptAlive)]
    if grows:
        counts = ", ".join(map(str, run.live_graph_nodes))
        diagnosis.symptom = f"live tensors keep more graph nodes at every optimizer step: {counts}"
        diagnosis.finding = min(kept, key=_fixable_first, default=None)
        return
    for finding in sorted(last_batch, key=_fixable_first):
        body_line = _loop_body_lines(analysis, finding)[0]
        iterations, backwards = run.line_counts.get(body_line, 0), run.line_counts.get(finding.line, 0)
        if backwards and iterations > backwards:
            diagnosis.symptom = (
                f"the loop body at line {body_line} ran {iterations} times, the backward at line "
                f"{finding.line} ran {backwards}: {iterations - backwards} iterations never reached it"
            )
            diagnosis.finding = finding
            return


def _loop_body_lines(analysis: FileAnalysis, finding: Finding) -> list[int]:
    """The first line of the body of each loop a finding names."""
    return [
        analysis.line(loop.node.body.body[0]) for loop in analysis.loops if not loop.is_call and analysis.line(loop.node) in finding.related_lines
    ]


def _fixable_first(finding: Finding) -> tuple:
    return (finding.fix is None, finding.line)


def fix_and_rerun(diagnosis: Diagnosis, runner: ScriptRunner, options: RunOptions) -> RunResult:
    """Write the matching rule's rewrite to the file it rewrites and run the script again within the same bounds,
    measuring again what showed a silent bug, or noting the parameters its backwards reach. A
    rewrite the run does not confirm (``Diagnosis.confirmed_by``) is taken back: a fix whose program
    still fails, or fails anew, is never left in the file."""
    fixed = Path(diagnosis.fix.path)  # the script, or the module the rule's finding is in
    write_atomically(fixed, diagnosis.fix.rewritten, expected=diagnosis.fix.original)
    # An unsafe rewrite ran already, from memory, before it was offered: the same bytes, the same bounds.
    again = diagnosis.fix_run or runner.run(diagnosis.script, _confirming_options(diagnosis, options))
    if not diagnosis.confirmed_by(again)[0]:
        write_atomically(fixed, diagnosis.fix.original, expected=diagnosis.fix.rewritten)
    return again


def _confirming_options(diagnosis: Diagnosis, options: RunOptions) -> RunOptions:
    """``options`` for the run that confirms the rule's rewrite: measuring again what showed a
    silent bug, or noting the parameters its backwards reach."""
    measured = bool(diagnosis.symptom)
    return replace(options, detect_anomaly=False, measure_graphs=measured, record_gradients=not measured, recorded_steps=1)


def gradients_lost(original: RunResult, run: RunResult) -> str:
    """The parameters the original trains (``trained_leaves``) that no backward of ``run``
    reaches, in words; "" when there are none."""
    lost = sorted(trained_leaves(original) - run.reached_leaves)
    return f"{leaves_in_words(original, lost)} gets no gradient" if lost else ""


def trained_leaves(original: RunResult) -> set[str]:
    """The leaves a backward of the original reached that it trains: its optimizers' when it has
    any (a teacher it keeps as a moving average of its student is updated by hand, not trained by
    the gradients that reach it); without an optimizer, those it updates by hand."""
    reached = original.reached_leaves
    return {label for label in reached if label.startswith("optimizer ")} or reached & original.updated_leaves


def leaves_in_words(run: RunResult, labels: list[str]) -> str:
    """The first of ``labels`` by the name the user knows, and how many more."""
    first = run.leaf_names.get(labels[0], labels[0])
    return f"{first}{f' and {len(labels) - 1} more' if len(labels) > 1 else ''}"


def _matching_finding(analysis: FileAnalysis, findings: list[Finding], diagnosis: Diagnosis) -> Finding | None:
    """The finding that names the failing backward or the line that built the freed graph; failing
    that, one in the function that built the graph (state a module keeps between calls); failing
    that, when the backward that failed ran inside a framework (a trainer backwards what a hook
    returned) and the file has a single finding, that one."""
    # The whole stack that built the freed node: a helper's line, and the constructor that called it.
    path = str(diagnosis.module) if diagnosis.module is not None else ""
    frames = [diagnosis.failing, *(f for f in diagnosis.run.forward_frames if f.path == path)]
    lines = {frame.line for frame in frames if frame is not None}

    def rank(finding: Finding) -> tuple:
        named = len(lines & {finding.line, *finding.related_lines})
        return (finding.fix is None, -named, finding.line)  # a finding with a fix first

    named = sorted((f for f in findings if lines & {f.line, *f.related_lines}), key=rank)
    if named:
        return named[0]
    function = analysis.function_at(diagnosis.graph.line) if diagnosis.graph else None
    if function is None:
        failed_in_framework = diagnosis.failing is not None and _site_at(analysis, analysis.statement_at(diagnosis.failing.line)) is None
        return findings[0] if failed_in_framework and len(findings) == 1 else None
    lines_of_function = analysis.range(function)
    nearby = [f for f in findings if lines_of_function.start.line <= f.line <= lines_of_function.end.line]
    return min(nearby, key=rank, default=None)


def _where_kept(analysis: FileAnalysis, innermost: Frame) -> str:
    """Where a line that built the freed graph (in the script or a module beside it) stores it,
    if it stores it."""
    where = ""
    if innermost.path:
        try:
            analysis = FileAnalysis(parse_source(Path(innermost.path).read_bytes(), innermost.path))
        except (OSError, SourceError):
            return ""
        where = f", in {Path(innermost.path).name}"
    statement = analysis.statement_at(innermost.line)
    kept = _kept_in(analysis, statement) if isinstance(statement, cst.SimpleStatementLine) else ""
    return kept + where if kept else ""


def _kept_in(analysis: FileAnalysis, statement: cst.SimpleStatementLine) -> str:
    """Where ``statement`` keeps what it computes: the first place it stores into."""
    small = statement.body[0]
    in_function = analysis.function_at(analysis.line(statement)) is not None
    targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else []
    if isinstance(small, (cst.AugAssign, cst.AnnAssign)):
        targets = [small.target]
    call = small.value if isinstance(small, cst.Expr) else None
    if method_called(call) in APPENDING_METHODS:
        return f"`{code_of(call.func.value)}` (a list, kept as long as the list is)"
    for target in targets:
        if isinstance(target, cst.Attribute) and is_name(target.value, "self"):
            return f"`{code_of(target)}` (an attribute of the object, kept between calls)"
        if isinstance(target, cst.Attribute):
            return f"`{code_of(target)}` (an attribute of `{code_of(target.value)}`)"
        if isinstance(target, cst.Subscript):
            return f"`{code_of(target)}` (an item of a list or dict, kept as long as it is)"
        if isinstance(target, (cst.Name, cst.Tuple, cst.List)):
            scope = "a local variable of the function" if in_function else "a global variable of the script"
            return f"`{code_of(target)}` ({scope})"
    return ""


def _relation(analysis: FileAnalysis, diagnosis: Diagnosis) -> str:
    failing, graph = diagnosis.failing, diagnosis.graph
    backward_statement = analysis.statement_at(failing.line) if failing else None
    graph_statement = analysis.statement_at(graph.line) if graph else None
    if backward_statement is None or graph_statement is None:
        return ""
    earlier_iteration = diagnosis.failing_call_number > 1

    def place(text: str) -> str:  # (render describes the relation: a script's lines are named there)
        return f"{diagnosis.module.name} {text}" if diagnosis.module is not None else text

    graph_function = analysis.function_at(graph.line)
    if graph_function is not analysis.function_at(failing.line):
        name = graph_function.name.value if graph_function else "the module body"
        if earlier_iteration:
            return (
                f"the graph was built in `{name}` during an earlier call and kept for the next call "
                f"(state carried between calls); the previous backward had already freed it"
            )
        return f"the graph was built in `{name}`, and an earlier backward in this step already freed it"
    loops = [loop for loop in analysis.loops_around(backward_statement) if not loop.is_call]
    if loops and not analysis.contains(loops[0].node, graph_statement):
        return (
            f"the graph was built once, before the loop at {place(f'line {analysis.line(loops[0].node)}')}, "
            "and the loop backwards through it on every iteration"
        )
    if earlier_iteration and loops:
        return (
            f"a value built in the previous iteration of the loop at {place(f'line {analysis.line(loops[0].node)}')} was carried "
            "into this one; the previous iteration's backward had already freed its graph"
        )
    if earlier_iteration:
        return "a value built by an earlier call of this line was carried into this one; that call's backward had already freed its graph"
    earlier = _earlier_backward(analysis, backward_statement)
    if earlier is None:
        return "an earlier backward in this step already freed this graph"
    failing_site = _site_at(analysis, backward_statement)
    earlier_line = place(f"line {analysis.line(earlier.call)}")
    if (
        earlier.tensor is not None
        and failing_site is not None
        and failing_site.tensor is not None
        and earlier.tensor.deep_equals(failing_site.tensor)
    ):
        return f"the same tensor was already backwarded at {earlier_line}"
    return f"the backward at {earlier_line} already walked (and freed) this graph: the two losses share it"


def _site_at(analysis: FileAnalysis, statement: cst.CSTNode):
    return next(iter(analysis.sites_in(statement)), None)


def _earlier_backward(analysis: FileAnalysis, statement: cst.CSTNode):
    """The closest backward before ``statement`` in the same function."""
    function = analysis.function_at(analysis.line(statement))
    earlier = [
        site
        for site in analysis.backward_sites
        if analysis.start(site.call) < analysis.start(statement) and analysis.function_at(analysis.line(site.call)) is function
    ]
    return earlier[-1] if earlier else None
