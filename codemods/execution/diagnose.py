"""Diagnosing a user's training script: run it a few steps with anomaly detection, and when the
"backward through the graph a second time" error happens, say where and why, and which rule fixes it.

The run gives two lines: the ``.backward()`` that failed (from the error's traceback, with how many
times that line had run) and the line that built the graph that was already freed (from anomaly
mode's traceback of the forward call). The static analysis of the same file tells how they relate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import libcst as cst

from ..analysis import FileAnalysis
from ..engine import FileReport, FixMode, check_source, find_violations, parse_source, write_atomically
from ..registry import all_rules
from ..rule import Finding, FixKind, Rule
from .runner import Frame, RunOptions, RunResult, ScriptRunner

SECOND_BACKWARD = "Trying to backward through the graph a second time"


@dataclass
class Diagnosis:
    script: Path
    run: RunResult
    failing: Frame | None = None  # the backward call that raised
    failing_call_number: int = 0  # how many times that line had called backward, the failing call included
    loop_line: int | None = None  # the innermost loop around the failing backward
    graph: Frame | None = None  # where the freed graph was built
    relation: str = ""  # how the two lines relate, in plain words
    finding: Finding | None = None  # the rule's finding that matches
    fix: FileReport | None = None  # that rule's rewrite of the script, when it has one

    @property
    def second_backward(self) -> bool:
        return self.run.status == "error" and SECOND_BACKWARD in self.run.error_message

    @property
    def rule(self) -> type[Rule] | None:
        return next((r for r in all_rules() if self.finding and r.CODE == self.finding.code), None)


def diagnose(script: Path, runner: ScriptRunner, options: RunOptions) -> Diagnosis:
    """Run ``script`` with anomaly detection within ``options``' bounds, and explain its failure.
    Raises ``SourceError`` before running anything when the script cannot be parsed."""
    source = script.read_bytes()
    analysis = FileAnalysis.of_module(parse_source(source, str(script)))
    run = runner.run(script, replace(options, detect_anomaly=True))
    diagnosis = Diagnosis(script, run)
    if not diagnosis.second_backward:
        return diagnosis
    diagnosis.failing = run.failing_frames[-1] if run.failing_frames else None
    diagnosis.graph = run.forward_frames[-1] if run.forward_frames else None
    if diagnosis.failing is not None:
        diagnosis.failing_call_number = run.backward_calls_by_line.get(diagnosis.failing.line, 1)
        loops = [loop for loop in analysis.loops_around(analysis.statement_at(diagnosis.failing.line)) if not loop.is_call]
        diagnosis.loop_line = analysis.line(loops[0].node) if loops else None
    diagnosis.relation = _relation(analysis, diagnosis)
    diagnosis.finding = _matching_finding(analysis, str(script), diagnosis)
    if diagnosis.finding is not None and diagnosis.finding.fix is not None:
        mode = FixMode.UNSAFE if diagnosis.finding.fix is FixKind.UNSAFE else FixMode.SAFE
        report = check_source(source, [diagnosis.rule], mode, str(script))
        diagnosis.fix = report if report.changed else None
    return diagnosis


def fix_and_rerun(diagnosis: Diagnosis, runner: ScriptRunner, options: RunOptions) -> RunResult:
    """Write the matching rule's rewrite to the script and run it again within the same bounds."""
    write_atomically(diagnosis.script, diagnosis.fix.rewritten)
    return runner.run(diagnosis.script, replace(options, detect_anomaly=False))


def _matching_finding(analysis: FileAnalysis, path: str, diagnosis: Diagnosis) -> Finding | None:
    """The finding that names the failing backward or the line that built the freed graph; failing
    that, one in the function that built the graph (state a module keeps between calls); failing
    that, when the backward that failed ran inside a framework (a trainer backwards what a hook
    returned) and the file has a single finding, that one."""
    # The whole stack that built the freed node: a helper's line, and the constructor that called it.
    frames = [diagnosis.failing, *diagnosis.run.forward_frames]
    lines = {frame.line for frame in frames if frame is not None}
    findings = [replace(v.finding, path=path) for v in find_violations(analysis, all_rules())]

    def rank(finding: Finding) -> tuple:
        named = len(lines & {finding.line, *finding.related_lines})
        return (finding.fix is None, -named, finding.line)  # a finding with a fix first

    named = sorted((f for f in findings if lines & {f.line, *f.related_lines}), key=rank)
    if named:
        return named[0]
    function = analysis.function_at(diagnosis.graph.line) if diagnosis.graph else None
    if function is None:
        failed_in_framework = diagnosis.failing is not None and _site_at(
            analysis, analysis.statement_at(diagnosis.failing.line)
        ) is None
        return findings[0] if failed_in_framework and len(findings) == 1 else None
    lines_of_function = analysis.range(function)
    nearby = [f for f in findings if lines_of_function.start.line <= f.line <= lines_of_function.end.line]
    return min(nearby, key=rank, default=None)


def _relation(analysis: FileAnalysis, diagnosis: Diagnosis) -> str:
    failing, graph = diagnosis.failing, diagnosis.graph
    backward_statement = analysis.statement_at(failing.line) if failing else None
    graph_statement = analysis.statement_at(graph.line) if graph else None
    if backward_statement is None or graph_statement is None:
        return ""
    earlier_iteration = diagnosis.failing_call_number > 1
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
            f"the graph was built once, before the loop at line {analysis.line(loops[0].node)}, "
            f"and the loop backwards through it on every iteration"
        )
    if earlier_iteration:
        loop_line = analysis.line(loops[0].node) if loops else failing.line
        return (
            f"a value built in the previous iteration of the loop at line {loop_line} was carried into "
            f"this one; the previous iteration's backward had already freed its graph"
        )
    earlier = _earlier_backward(analysis, backward_statement)
    if earlier is None:
        return "an earlier backward in this step already freed this graph"
    failing_site = _site_at(analysis, backward_statement)
    if earlier.tensor is not None and failing_site is not None and failing_site.tensor is not None and earlier.tensor.deep_equals(
        failing_site.tensor
    ):
        return f"the same tensor was already backwarded at line {analysis.line(earlier.call)}"
    return (
        f"the backward at line {analysis.line(earlier.call)} already walked (and freed) this graph: "
        f"the two losses share it"
    )


def _site_at(analysis: FileAnalysis, statement: cst.CSTNode):
    return next((site for site in analysis.backward_sites if site.statement is statement), None)


def _earlier_backward(analysis: FileAnalysis, statement: cst.CSTNode):
    """The closest backward before ``statement`` in the same function."""
    function = analysis.function_at(analysis.line(statement))
    earlier = [
        site
        for site in analysis.backward_sites
        if analysis.start(site.call) < analysis.start(statement)
        and analysis.function_at(analysis.line(site.call)) is function
    ]
    return earlier[-1] if earlier else None
