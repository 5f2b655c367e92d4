"""What ``gradfix fix --verify "python FILE"`` makes of the fixture corpus and of ../shared/real-breaks,
and what it costs over the program's own run.

usage: python benchmarks/fix_verify.py [--fixtures] [--real-breaks] [--rule NAME ...] [--per-rule N] [--cases RULE/CASE ...]
(neither --fixtures nor --real-breaks: both)

Fixtures: every before.py of tests/fixtures (before/after pairs, in the mode of the case) runs as
``python before.py`` in a copy of its case's folder (the modules beside it included); its rewrite is
verified, refused or not exercised. A
preserving rewrite (a safe fix of a rule that keeps the gradients of ``retain_graph=True``) is
expected verified. One line per case.
Real breaks: each program (a file, or a folder run as ``python main.py``) is fixed with
``--unsafe-fixes --verify``, the verified rewrites are written into a copy, and the program runs
again, before and after, with the seeds the verification's runs get: it must print what it printed
and end as it ended ("keeps its result"), or, if it failed, now run ("runs"); anything else is
"BROKEN".
Prints the counts, and the seconds of verification over the seconds of the program's own run.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from gradfix.codemods.check import check_source
from gradfix.codemods.config import Overrides, Settings
from gradfix.codemods.execution import trace
from gradfix.codemods.execution.runner import ScriptRunner
from gradfix.codemods.execution.verify import discover
from gradfix.codemods.execution.verify_command import verify_rewrites
from gradfix.codemods.run import check_paths

ROOT = Path(__file__).resolve().parents[1]
REAL_BREAKS = ROOT.parent / "shared" / "real-breaks"
PROGRAM_TIMEOUT = 300


def _own_run(folder: Path, script: str) -> float:
    """The seconds the program takes, run as its user runs it (``PROGRAM_TIMEOUT`` when a loaded
    machine does not let it end by then: the case is verified all the same)."""
    started = time.monotonic()
    with contextlib.suppress(subprocess.TimeoutExpired):
        subprocess.run([sys.executable, script], cwd=folder, capture_output=True, timeout=PROGRAM_TIMEOUT)
    return time.monotonic() - started


def _seeded_run(folder: Path, script: str) -> subprocess.CompletedProcess:
    """The program run with the seeds a verification's runs get (``trace.py`` as its
    sitecustomize): a program that does not seed itself prints the same numbers twice."""
    with tempfile.TemporaryDirectory(prefix="fix-verify-seeds-") as temporary:
        bootstrap, traces = Path(temporary) / "bootstrap", Path(temporary) / "traces"
        bootstrap.mkdir()
        traces.mkdir()
        shutil.copyfile(trace.__file__, bootstrap / "sitecustomize.py")
        environment = {**os.environ, "PYTHONPATH": str(bootstrap), trace.FOLDER_VARIABLE: str(traces), trace.ROOT_VARIABLE: str(folder)}
        return subprocess.run([sys.executable, script], cwd=folder, capture_output=True, text=True, timeout=PROGRAM_TIMEOUT, env=environment)


def fixtures(runner: ScriptRunner, rules: list[str], per_rule: int | None, names: list[str]) -> tuple[Counter, float, float]:
    counts: Counter = Counter()
    verifying = own = 0.0
    cases = [c for c in discover([ROOT / "tests" / "fixtures"]) if c.kind == "pair" and not c.missing_modules()]
    cases = [c for c in cases if (not rules or c.rule.NAME in rules or c.rule.CODE in rules) and (not names or c.name in names)]
    if per_rule is not None:
        cases = [c for _, of_rule in itertools.groupby(cases, key=lambda c: c.rule.CODE) for c in itertools.islice(of_rule, per_rule)]
    for case in cases:
        preserving = case.rule.KEEPS_GRADIENTS and not case.unsafe
        with tempfile.TemporaryDirectory(prefix="fix-verify-") as temporary:
            folder = Path(temporary) / case.directory.name
            shutil.copytree(case.directory, folder)  # with the modules beside before.py
            script = folder / "before.py"
            report = check_source(script.read_bytes(), [case.rule], case.mode, str(script))
            seconds = _own_run(folder, script.name)
            started = time.monotonic()
            verdicts = verify_rewrites([report], f"python {script.name}", runner, folder)
            took = time.monotonic() - started
            verifying, own = verifying + took, own + seconds
        kind, status = "preserving" if preserving else "other", verdicts[0].status if verdicts else "no rewrite"
        counts[(kind, status)] += 1
        detail = f": {verdicts[0].detail}" if verdicts and verdicts[0].detail else ""
        print(f"{case.name} ({kind}): {status}{detail} [{took:.1f} s, the program's own {seconds:.1f} s]", flush=True)
    return counts, verifying, own


def real_breaks(runner: ScriptRunner) -> tuple[Counter, float, float]:
    counts: Counter = Counter()
    verifying = own = 0.0
    programs = sorted(p for p in REAL_BREAKS.iterdir() if p.suffix == ".py" or (p / "main.py").is_file())
    for program in programs:
        with tempfile.TemporaryDirectory(prefix="fix-verify-") as temporary:
            folder = Path(temporary) / program.stem
            if program.is_dir():
                shutil.copytree(program, folder)
                script = "main.py"
            else:
                folder.mkdir()
                shutil.copy(program, folder / program.name)
                script = program.name
            reports = [r for r in check_paths([folder], Overrides(unsafe_fixes=True), Settings(), fixing=True).reports if r.changed]
            if not reports:
                counts["keeps its result"] += 1
                print(f"{program.name}: keeps its result; no rewrite", flush=True)
                continue
            seconds, before = _own_run(folder, script), _seeded_run(folder, script)
            started = time.monotonic()
            verdicts = verify_rewrites(reports, f"python {script}", runner, folder)
            verifying, own = verifying + time.monotonic() - started, own + seconds
            verified = {v.path for v in verdicts if v.status == "verified"}
            for report in reports:
                if report.path in verified:
                    Path(report.path).write_bytes(report.rewritten)
            after = _seeded_run(folder, script)
        if (after.returncode, after.stdout) == (before.returncode, before.stdout):
            outcome = "keeps its result"
        elif before.returncode != 0 and after.returncode == 0:
            outcome = "runs"
        else:
            outcome = "BROKEN"
        counts[outcome] += 1
        shown = ", ".join(f"{Path(v.path).name} {v.status}" + (f" ({v.detail})" if v.detail else "") for v in verdicts) or "no rewrite"
        print(f"{program.name}: {outcome}; {shown}", flush=True)
    return counts, verifying, own


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", action="store_true")
    parser.add_argument("--real-breaks", action="store_true")
    parser.add_argument("--rule", nargs="*", default=[], help="fixtures of these rules only (names or codes)")
    parser.add_argument("--per-rule", type=int, metavar="N", help="the first N fixture cases of each rule only")
    parser.add_argument("--cases", nargs="*", default=[], metavar="RULE/CASE", help="these fixture cases only (as the lines name them)")
    arguments = parser.parse_args()
    both = not arguments.fixtures and not arguments.real_breaks
    with ScriptRunner() as runner:
        if arguments.fixtures or both:
            counts, verifying, own = fixtures(runner, arguments.rule, arguments.per_rule, arguments.cases)
            for (kind, status), number in sorted(counts.items()):
                print(f"fixtures, {kind} rewrites: {number} {status}")
            print(f"fixtures: verification took {verifying:.0f} s, {verifying / max(own, 1e-9):.1f}x the programs' own {own:.0f} s")
        if arguments.real_breaks or both:
            counts, verifying, own = real_breaks(runner)
            print("real breaks: " + ", ".join(f"{number} {outcome}" for outcome, number in sorted(counts.items())))
            print(f"real breaks: verification took {verifying:.0f} s, {verifying / max(own, 1e-9):.1f}x the programs' own {own:.0f} s")


if __name__ == "__main__":
    main()
