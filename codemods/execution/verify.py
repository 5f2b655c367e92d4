"""Proving rewrites by running them: the checks behind ``gradfix verify`` and the test suite.

A fixture folder is ``<rule name>/<case>/`` holding one of:

* ``before.py`` and ``after.py``: ``before.py`` shows the bug (the rule's symptom: it raises the
  error, or, for a silent bug, a measure of the run shows it), the rule rewrites it into exactly
  ``after.py``, which runs without the symptom; rewriting ``after.py`` changes nothing; and when
  the rule keeps the maths, ``after.py`` gives the gradients ``before.py`` gives with
  ``retain_graph=True`` on every backward. Cases named ``unsafe_*`` use the rule's unsafe fixes.
* ``ok.py``: correct code that looks like the bug; the rule leaves it alone, and it runs.
* ``reported.py``: the bug in a shape the rule cannot prove a rewrite for; it shows the symptom, and
  the rule reports it without changing the file.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..check import check_source
from ..files import unified_diff, unreadable_kind
from ..report import FileReport, FixMode
from ..registry import all_rules
from ..rule import FixKind, Rule
from .gradients import compare_gradients, tolerance_in_words
from .runner import RunOptions, RunResult, ScriptRunner

KINDS = ("before.py", "ok.py", "reported.py")


@dataclass(frozen=True)
class FixtureCase:
    rule: type[Rule]
    directory: Path
    kind: str  # "pair", "ok" or "reported"

    @property
    def name(self) -> str:
        return f"{fixture_folder(self.rule)}/{self.directory.name}"

    @property
    def unsafe(self) -> bool:
        """Cases named ``unsafe_*``, and every case of a rule whose fixes are all unsafe."""
        return self.directory.name.startswith("unsafe_") or self.rule.FIX is FixKind.UNSAFE

    @property
    def mode(self) -> FixMode:
        return FixMode.UNSAFE if self.unsafe else FixMode.SAFE

    def file(self, name: str) -> Path:
        return self.directory / name

    def missing_modules(self) -> list[str]:
        """Top-level modules the case's scripts import that are neither installed here nor beside
        them (DeepSpeed is optional: its fixtures run where it is)."""
        names = set()
        for script in self.directory.glob("*.py"):
            for node in ast.walk(ast.parse(script.read_bytes())):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module.split(".")[0])
        beside = {script.stem for script in self.directory.glob("*.py")}
        return sorted(name for name in names - beside if importlib.util.find_spec(name) is None)


@dataclass(frozen=True)
class CheckResult:
    case: FixtureCase
    check: str
    passed: bool
    detail: str


class BadFixture(ValueError):
    pass


def fixture_folder(rule: type[Rule]) -> str:
    """The folder of a rule's fixture cases: its module's name (``gf002_separate_backwards``)."""
    return f"{rule.CODE.lower()}_{rule.NAME}"


def discover(roots: Iterable[str | Path]) -> list[FixtureCase]:
    """Fixture cases under ``roots``: a folder of rule folders, a rule folder or a case folder.
    ``BadFixture`` for a script that is not a regular file (a FIFO would block the read, a device
    would never end it)."""
    # A rule's folder is named after its module (``gf002_separate_backwards``); its bare name is
    # read too, as fixture folders written before were named.
    rules = {name: rule for rule in all_rules() for name in (fixture_folder(rule), rule.NAME)}
    cases = []
    for root in map(Path, roots):
        if not root.is_dir():
            raise BadFixture(f"{root}: not a folder")
        for marker in sorted(p for kind in KINDS for p in [*root.glob(kind), *root.glob(f"*/{kind}"), *root.glob(f"*/*/{kind}")]):
            directory = marker.parent
            rule = rules.get(directory.parent.name)
            if rule is None:
                raise BadFixture(f"{directory}: its parent folder names no rule (one of {', '.join(sorted(map(fixture_folder, all_rules())))})")
            for script in sorted(directory.glob("*.py")):  # each is read, and may be run
                problem = unreadable_kind(script)
                if problem:
                    raise BadFixture(f"{script}: {problem}")
            kind = {"before.py": "pair", "ok.py": "ok", "reported.py": "reported"}[marker.name]
            if kind == "pair" and not (directory / "after.py").is_file():
                raise BadFixture(f"{directory}: before.py has no after.py beside it")
            cases.append(FixtureCase(rule, directory, kind))
    return sorted(set(cases), key=lambda c: (c.rule.CODE, str(c.directory)))


# checks -----------------------------------------------------------------------------------------
Outcome = tuple[bool, str]  # passed, and what was seen
Check = Callable[[FixtureCase, "RunCache"], Outcome]


class RunCache:
    """Runs each script, as it is now, once per set of options, each run within ``timeout`` seconds."""

    def __init__(self, runner: ScriptRunner, timeout: float = RunOptions.timeout) -> None:
        self.runner = runner
        self.timeout = timeout
        self._results: dict[tuple[Path, str, RunOptions], RunResult] = {}

    def run(self, script: Path, options: RunOptions = RunOptions()) -> RunResult:
        options = replace(options, timeout=self.timeout)
        key = (script.resolve(), hashlib.sha256(script.read_bytes()).hexdigest(), options)
        if key not in self._results:
            self._results[key] = self.runner.run(script, options)
        return self._results[key]


def _rewrite(case: FixtureCase, name: str) -> FileReport:
    return check_source(case.file(name).read_bytes(), [case.rule], case.mode, str(case.file(name)))


def check_rewrite(case: FixtureCase, _: RunCache) -> Outcome:
    report = _rewrite(case, "before.py")
    expected = case.file("after.py").read_bytes()
    produced = report.rewritten or report.original
    if produced == expected:
        return True, "before.py is rewritten into after.py"
    problems = "; ".join(report.errors + report.internal_errors)
    difference = FileReport(str(case.file("after.py")), original=expected, rewritten=produced)
    return False, problems or "the rewrite differs from after.py:\n" + unified_diff(difference)


def check_idempotent(case: FixtureCase, _: RunCache) -> Outcome:
    report = _rewrite(case, "after.py")
    return (False, "rewriting after.py changes it again") if report.changed else (True, "after.py is left as it is")


def _check_untouched(name: str) -> Check:
    def check(case: FixtureCase, _: RunCache) -> Outcome:
        report = _rewrite(case, name)
        if report.changed or report.errors:
            return False, f"{name} was changed" if report.changed else "; ".join(report.errors)
        if case.kind == "ok" and report.findings:
            return False, "findings on correct code: " + "; ".join(f.render() for f in report.findings)
        if case.kind == "reported" and not report.findings:
            return False, f"{case.rule.CODE} did not report the bug"
        return True, f"{name} is left as it is" + (" and reported" if report.findings else "")

    return check


def _options(case: FixtureCase) -> RunOptions:
    return RunOptions(measure_graphs=case.rule.SYMPTOM.measures_graphs)


def _check_shows_bug(name: str) -> Check:
    def check(case: FixtureCase, runs: RunCache) -> Outcome:
        shown, seen = case.rule.SYMPTOM.shown_by(runs.run(case.file(name), _options(case)))
        return shown, f"{name} ({case.rule.SYMPTOM.description}): {seen}"

    return check


def check_fixed(case: FixtureCase, runs: RunCache) -> Outcome:
    before = runs.run(case.file("before.py"), _options(case))
    gone, seen = case.rule.SYMPTOM.gone(before, runs.run(case.file("after.py"), _options(case)))
    return gone, f"after.py: {seen}"


def check_correct(case: FixtureCase, runs: RunCache) -> Outcome:
    absent, seen = case.rule.SYMPTOM.absent_from(runs.run(case.file("ok.py"), _options(case)))
    return absent, f"ok.py: {seen}"


def check_gradients(case: FixtureCase, runs: RunCache) -> Outcome:
    retained = runs.run(case.file("before.py"), RunOptions(retain_graph=True, record_gradients=True))
    fixed = runs.run(case.file("after.py"), RunOptions(record_gradients=True))
    for label, result in (("before.py with retain_graph=True", retained), ("after.py", fixed)):
        if result.status != "ok":
            return False, f"{label}: {result.describe()}"
    if not fixed.gradients:
        return False, "no gradients or parameters were recorded to compare"
    difference = compare_gradients(retained.gradients, fixed.gradients)
    if difference:
        return False, difference
    return True, f"{len(fixed.gradients)} recorded tensors match to {tolerance_in_words()}"


def checks_for(case: FixtureCase) -> list[tuple[str, Check]]:
    if case.kind == "pair":
        checks = [
            ("rewrite", check_rewrite),
            ("idempotent", check_idempotent),
            ("before shows the bug", _check_shows_bug("before.py")),
            ("after is fixed", check_fixed),
        ]
        if case.rule.KEEPS_GRADIENTS and not case.unsafe:
            checks.append(("gradients", check_gradients))
        return checks
    name = f"{case.kind}.py"
    checks = [("untouched", _check_untouched(name))]
    checks.append(("runs", check_correct) if case.kind == "ok" else ("shows the bug", _check_shows_bug(name)))
    return checks


def verify(cases: Iterable[FixtureCase], runner: ScriptRunner, timeout: float = RunOptions.timeout) -> Iterator[CheckResult]:
    runs = RunCache(runner, timeout)
    for case in cases:
        for name, check in checks_for(case):
            passed, detail = check(case, runs)
            yield CheckResult(case, name, passed, detail)
