"""One program judged against its safe fixes by running both: the check that
tests/test_fuzz_safe_fixes.py asserts and benchmarks/fuzz_safe_fixes.py counts.

The program runs first (and, if it fails with the second-backward error, again with
``retain_graph=True`` forced: that run is what a fix of the error must match). gradfix's safe fixes
must then give code that compiles, that a second fix leaves alone, that runs (a fix that leaves the
error in place is allowed, and then runs with ``retain_graph=True`` like the original), and, when
every fix made is one that keeps the maths, the same gradients at every optimizer step and the same
final parameters.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from gradfix.codemods.check import check_source
from gradfix.codemods.report import FixMode
from gradfix.codemods.execution.runner import RunOptions, RunResult, ScriptRunner
from gradfix.codemods.execution.verify import compare_gradients
from gradfix.codemods.registry import all_rules
from gradfix.codemods.symptoms import SECOND_BACKWARD

from .training_programs import MAX_BACKWARD_CALLS

RAN, RAN_RETAINED, DID_NOT_RUN = "ran", "ran with retain_graph=True", "did not run"
# What a backward through a kept graph raises after an optimizer changed a weight that graph saved.
WEIGHT_CHANGED_UNDER_GRAPH = "modified by an inplace operation"
# A bound far above what a generated program does: reaching it means the program is not tiny.
STEP_BOUND = 2 * MAX_BACKWARD_CALLS
RUN = RunOptions(record_gradients=True, max_steps=STEP_BOUND, timeout=30.0)
RETAINED_RUN = RunOptions(record_gradients=True, max_steps=STEP_BOUND, timeout=30.0, retain_graph=True)


def gradient_keeping_codes() -> frozenset[str]:
    """Rules whose safe fixes must give the same gradients: those that declare it (``KEEPS_GRADIENTS``)."""
    return frozenset(rule.CODE for rule in all_rules() if rule.KEEPS_GRADIENTS)


@dataclass
class Verdict:
    ran: str  # RAN, RAN_RETAINED or DID_NOT_RUN (then only the rewrite itself is checked)
    rewrites: Counter = field(default_factory=Counter)  # fixes made, by rule code
    failure: str = ""  # what kind of failure, "" when the fixes held
    detail: str = ""
    still_fails: bool = False  # the rewrite keeps the second-backward error that no rule fixed
    compared: bool = False  # gradients were compared

    def __str__(self) -> str:
        return f"{self.failure}: {self.detail}" if self.failure else "held"


def judge(source: str, runner: ScriptRunner, folder: Path) -> Verdict:
    original_path, fixed_path = folder / "program.py", folder / "fixed.py"
    original_path.write_text(source)
    original = runner.run(original_path, RUN)
    reference, ran = original, RAN
    if original.status == "error" and SECOND_BACKWARD.text in original.error_message:
        reference, ran = runner.run(original_path, RETAINED_RUN), RAN_RETAINED
        if not _ran_to_the_end(reference):
            ran = DID_NOT_RUN
    elif original.status == "error" and WEIGHT_CHANGED_UNDER_GRAPH in original.error_message:
        ran = DID_NOT_RUN  # the program's own retain_graph=True kept a graph that an update outdated
    elif not _ran_to_the_end(original):
        return Verdict(DID_NOT_RUN, failure="invalid program", detail=original.describe())

    report = check_source(source.encode(), all_rules(), FixMode.SAFE)
    verdict = Verdict(ran, Counter(finding.code for finding in report.fixed))
    if report.errors or report.internal_errors:
        return _failed(verdict, "internal error", "; ".join(report.errors + report.internal_errors))
    if not report.changed:
        return verdict
    try:
        compile(report.rewritten, str(fixed_path), "exec", dont_inherit=True)
    except SyntaxError as error:
        return _failed(verdict, "rewrite does not compile", str(error))
    again = check_source(report.rewritten, all_rules(), FixMode.SAFE)
    if again.changed or again.internal_errors:
        return _failed(verdict, "not idempotent", "; ".join(again.internal_errors) or "a second fix changes the rewrite")
    if ran == DID_NOT_RUN:
        return verdict

    fixed_path.write_bytes(report.rewritten)
    fixed = runner.run(fixed_path, RUN)
    if fixed.status == "error" and SECOND_BACKWARD.text in fixed.error_message:
        if ran == RAN:
            return _failed(verdict, "fix brings the second-backward error", fixed.describe())
        verdict.still_fails = True
        fixed = runner.run(fixed_path, RETAINED_RUN)
    if not _ran_to_the_end(fixed):
        return _failed(verdict, "fixed program fails", fixed.describe())
    if set(verdict.rewrites) <= gradient_keeping_codes():
        verdict.compared = True
        difference = compare_gradients(reference.gradients, fixed.gradients)
        if difference:
            return _failed(verdict, "gradients differ", difference)
    return verdict


def _ran_to_the_end(result: RunResult) -> bool:
    """The step bound stops no generated program, so a stopped run is as bad as a failed one:
    its gradients are those of a different number of steps."""
    return result.status == "ok"


def _failed(verdict: Verdict, kind: str, detail: str) -> Verdict:
    verdict.failure, verdict.detail = kind, detail
    return verdict
