"""The oracle of the independent differential fuzz: a generated program
(tests/independent_programs.py) is run, fixed by gradfix (its safe fixes, and its unsafe ones when
a finding offers one), run again, and judged by what its construction says it is.

A program is made of sections that are independent of each other (each seeds its own random
numbers) and each prints, under its label, checksums of its parameters and the numbers it logged;
two runs of a section agree when every number agrees to ``RELATIVE``. A fix is placed in the
sections that run its line. A raising program's raising section runs last.

- The program must behave as built (else the generator is wrong: ``invalid``): a correct or leaking
  one runs; a raising one fails with the second-backward error, and its ``retain_graph=True``
  variant does not.
- Every section that does not raise must print, after the rewrite, the numbers it printed before:
  a correct section has nothing to change, and a leak's fix changes only what is kept alive.
- The raising section: when a fix placed in it is one of a rule whose symptom is the
  second-backward error, the rewrite must run; otherwise it may keep the error, and must not fail
  in another way. When every fix placed in it is a safe one of a rule that claims the results of
  the program that keeps its graphs (``same_result_codes``), it must print the numbers of the
  ``retain_graph=True`` variant.

Anything else is a broken rewrite. Leaving a program unchanged is never broken (it is a miss).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Mapping

import gradfix
from gradfix.codemods.api import Result
from gradfix.codemods.execution.runner import RunOptions, RunResult, ScriptRunner
from gradfix.codemods.report import Finding, FixKind
from gradfix.codemods.registry import all_rules
from gradfix.codemods.symptoms import SECOND_BACKWARD

from .independent_programs import LEAKING, RAISING_KIND, Program

RELATIVE = 1e-5
ABSOLUTE = 1e-9  # below this, two numbers are both zero
RUN = RunOptions(timeout=30.0, threads=1)
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+|nan|inf)")

Fixer = Callable[[str], Result]  # a program's source to gradfix's result for it


@lru_cache(maxsize=None)
def error_fixing_codes() -> frozenset[str]:
    """Rules whose fixes claim to remove the second-backward error."""
    return frozenset(rule.CODE for rule in all_rules() if rule.SYMPTOM == SECOND_BACKWARD)


@lru_cache(maxsize=None)
def same_result_codes() -> frozenset[str]:
    """Rules whose safe fixes claim the results of the program that keeps its graphs: those that
    declare they keep its gradients (``KEEPS_GRADIENTS``) or its values (``KEEPS_RESULTS``)."""
    return frozenset(rule.CODE for rule in all_rules() if rule.KEEPS_GRADIENTS or rule.KEEPS_RESULTS)


@dataclass(frozen=True)
class Outcome:
    status: str  # the runner's: "ok", "error", "timeout", "crashed"
    error: str  # "Type: message", when it failed
    numbers: Mapping[str, tuple[float, ...]]  # what each section printed, by its label
    finished: frozenset[str]  # the sections that printed their report
    stdout: str = field(repr=False)

    @classmethod
    def of(cls, run: RunResult) -> Outcome:
        error = f"{run.error_type}: {run.error_message}" if run.status == "error" else ("" if run.status == "ok" else run.describe())
        numbers: dict[str, tuple[float, ...]] = {}
        finished = set()
        for line in run.stdout.splitlines():
            label, _, rest = line.partition(" ")
            numbers[label] = numbers.get(label, ()) + tuple(float(n) for n in _NUMBER.findall(rest))
            if rest.startswith("parameters "):
                finished.add(label)
        return cls(run.status, error, numbers, frozenset(finished), run.stdout)

    @property
    def ran(self) -> bool:
        return self.status == "ok"

    @property
    def raised_second_backward(self) -> bool:
        return self.status == "error" and SECOND_BACKWARD.text in self.error

    def describe(self) -> str:
        return "ran" if self.ran else self.error.splitlines()[0][:200]


@dataclass
class Rewrite:
    mode: str
    fixed: tuple[Finding, ...] = ()
    source: str | None = None  # None: left byte-identical
    outcome: Outcome | None = None
    failure: str = ""  # the kind of breakage, "" when the rewrite held
    detail: str = ""
    section: str = ""  # the label of the section it broke
    blamed: tuple[str, ...] = ()  # the rules whose fixes are placed in that section

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(sorted({finding.code for finding in self.fixed}))


@dataclass
class Judgement:
    program: Program
    original: Outcome
    retained: Outcome | None = None  # raising programs: their retain_graph=True variant
    invalid: str = ""  # how the program does not behave as built
    rewrites: dict[str, Rewrite] = field(default_factory=dict)

    @property
    def broken(self) -> list[Rewrite]:
        return [rewrite for rewrite in self.rewrites.values() if rewrite.failure]

    def signatures(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """Each broken rewrite as (mode, kind of failure, rules blamed): what a smaller program
        showing the same defect must keep."""
        if self.invalid:
            return [("generator", "invalid program", ())]
        return [(r.mode, r.failure, r.blamed) for r in self.broken]

    def summary(self) -> str:
        program = self.program
        lines = [f"seed {program.seed}: {program.kind} program, sections {dict(program.shapes)}; original {self.original.describe()}"]
        if self.retained is not None:
            lines.append(f"its retain_graph=True variant: {self.retained.describe()}")
        if self.invalid:
            lines.append(f"INVALID PROGRAM: {self.invalid}")
        for rewrite in self.rewrites.values():
            state = "unchanged" if rewrite.source is None else f"rewritten by {', '.join(rewrite.codes)}"
            verdict = "held"
            if rewrite.failure:
                verdict = f"BROKEN, {rewrite.failure} in {rewrite.section} (fixes there: {', '.join(rewrite.blamed) or 'none'}): {rewrite.detail}"
            lines.append(f"{rewrite.mode} fixes: {state}: {verdict}")
        return "\n".join(lines)


GRADFIX_FIXERS: dict[str, Fixer] = {
    "safe": lambda source: gradfix.fix(source, path="program.py"),
    "unsafe": lambda source: gradfix.fix(source, path="program.py", unsafe_fixes=True),
}


def judge(program: Program, runner: ScriptRunner, folder: Path, fixers: Mapping[str, Fixer] = GRADFIX_FIXERS) -> Judgement:
    """Run ``program``, fix it with each of ``fixers`` (gradfix's safe and unsafe fixes), judge."""
    runs: dict[str, Outcome] = {}

    def run(source: str) -> Outcome:
        if source not in runs:
            script = folder / f"program_{len(runs)}.py"
            script.write_text(source)
            runs[source] = Outcome.of(runner.run(script, RUN))
        return runs[source]

    judgement = Judgement(program, run(program.source))
    if program.kind == RAISING_KIND:
        judgement.retained = run(program.retained_source)
        if not judgement.original.raised_second_backward:
            judgement.invalid = f"built to raise the second-backward error, but: {judgement.original.describe()}"
        elif judgement.retained.raised_second_backward:
            judgement.invalid = "its retain_graph=True variant raises the second-backward error too"
    elif not judgement.original.ran:
        judgement.invalid = f"built to run, but: {judgement.original.describe()}"
    if judgement.invalid:
        return judgement

    safe = fixers["safe"](program.source)
    judgement.rewrites["safe"] = judge_rewrite(judgement, "safe", safe, run)
    # The unsafe fixes are asked for only when a finding offers one: otherwise they are the safe ones.
    if "unsafe" in fixers and any(finding.fix == FixKind.UNSAFE for finding in safe.findings):
        unsafe = fixers["unsafe"](program.source)
        if unsafe.source != safe.source:
            judgement.rewrites["unsafe"] = judge_rewrite(judgement, "unsafe", unsafe, run)
    return judgement


def judge_rewrite(judgement: Judgement, mode: str, result: Result, run: Callable[[str], Outcome]) -> Rewrite:
    program, original = judgement.program, judgement.original
    rewritten = result.source if result.source != program.source else None
    rewrite = Rewrite(mode, result.fixed, rewritten)
    if result.errors:
        return _broken(rewrite, program, "", "gradfix error", "; ".join(result.errors))
    if rewritten is None:
        return rewrite
    try:
        compile(rewritten, "program.py", "exec", dont_inherit=True)
    except SyntaxError as error:
        return _broken(rewrite, program, "", "rewrite does not compile", str(error))
    after = rewrite.outcome = run(rewritten)

    for label in program.shapes:
        if label == program.raising_section:
            continue
        what = f"a {'leaking' if ('section.logging', program.choices[f'{label}.section.logging']) in LEAKING else 'correct'} section"
        if label not in after.finished:
            return _broken(rewrite, program, label, "fails after the fix", f"{what} now fails: {after.describe()}")
        difference = differences(original.numbers[label], after.numbers[label], after.stdout, label)
        if difference:
            return _broken(rewrite, program, label, "numbers changed", f"{what} prints other numbers: {difference}")
    if program.raising_section is None:
        return rewrite if after.ran else _broken(rewrite, program, "", "fails after the fix", after.describe())

    label = program.raising_section
    placed = [finding for finding in result.fixed if label in program.sections_at(finding.line)]
    if {finding.code for finding in placed} & error_fixing_codes():
        if after.raised_second_backward:
            return _broken(rewrite, program, label, "still raises", after.describe())
        if not after.ran:
            return _broken(rewrite, program, label, "fails after the fix", after.describe())
    elif not (after.ran or after.raised_second_backward):
        return _broken(rewrite, program, label, "fails after the fix", after.describe())
    reference = judgement.retained
    claims_same_result = placed and all(f.code in same_result_codes() and f.fix == FixKind.SAFE for f in placed)
    if after.ran and claims_same_result and reference is not None and reference.ran:
        difference = differences(reference.numbers[label], after.numbers[label], after.stdout, label)
        if difference:
            return _broken(rewrite, program, label, "differs from the retain_graph=True run", difference)
    return rewrite


def differences(expected: tuple[float, ...], found: tuple[float, ...], stdout: str, label: str) -> str:
    """The first number that differs by more than ``RELATIVE``, or "" when all agree."""
    if len(expected) != len(found):
        return f"{len(expected)} numbers printed before, {len(found)} after"
    for index, (before, after) in enumerate(zip(expected, found)):
        if not (math.isclose(before, after, rel_tol=RELATIVE, abs_tol=ABSOLUTE) or (math.isnan(before) and math.isnan(after))):
            return f"number {index + 1} was {before!r}, is {after!r} ({_line_of(stdout, label, index)!r})"
    return ""


def _line_of(stdout: str, label: str, index: int) -> str:
    for line in stdout.splitlines():
        label_of_line, _, rest = line.partition(" ")
        if label_of_line != label:
            continue
        count = len(_NUMBER.findall(rest))
        if index < count:
            return line
        index -= count
    return ""


def _broken(rewrite: Rewrite, program: Program, section: str, failure: str, detail: str) -> Rewrite:
    placed = [f for f in rewrite.fixed if not section or section in program.sections_at(f.line)]
    rewrite.failure, rewrite.detail, rewrite.section = failure, detail, section
    rewrite.blamed = tuple(sorted({finding.code for finding in placed}))
    return rewrite
