"""How gradfix does on real failing scripts, as a user runs it: ``fix --unsafe-fixes`` on a copy of
each script of ``../shared/real-failures`` (with the modules beside it), then the rewritten script.

usage: python benchmarks/real_failures.py [REAL_FAILURES_DIR] [--cases NAME ...] [--verbose]

Each failing script ends as one of:
  repaired  rewritten, and the rewrite runs clean (and, where the accepted fix keeps the maths,
            prints the accepted fix's CHECKSUM);
  reported  not repaired, but ``check`` has a finding that points at the failing backward's line
            or at a line of the stack that built the freed graph (culprits.json: the innermost
            frame and the frames of the script that called it), as its own line or one of the
            lines it names beside it (``related_lines``);
  missed    neither.
A silent script is repaired when the rewrite prints the accepted fix's symptom figure (MEMGROWTH,
TRAINED_BATCHES). A look-alike (correct code) counts as changed when any file is rewritten.
Prints one line per script, then a table per shape and the totals.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from gradfix.codemods.execution.runner import RunOptions, ScriptRunner

DEFAULT_ROOT = Path(__file__).resolve().parents[2] / "shared" / "real-failures"
SCRIPT = "train.py"
_CHECKSUM = re.compile(r"CHECKSUM\s+(\S+)")
_SYMPTOM = re.compile(r"^(MEMGROWTH|TRAINED_BATCHES)\s+(\S+)", re.M)


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # "raises", "silent" or "look-alike"
    folder: Path
    script: Path  # before.py or code.py
    shape: str
    culprit_lines: frozenset[int]
    preserving: bool

    @property
    def fixed(self) -> Path:
        return self.folder / "fixed.py"


def cases(root: Path) -> list[Case]:
    found = []
    for culprits_file in sorted(root.glob("*/culprits.json")):
        culprits = json.loads(culprits_file.read_text())
        for kind, folder_name, script_name in (
            ("raises", "cases", "before.py"),
            ("silent", "silent", "before.py"),
            ("look-alike", "negatives", "code.py"),
        ):
            for folder in sorted((culprits_file.parent / folder_name).glob("*/")):
                if not (folder / script_name).is_file():
                    continue
                meta_file = folder / "meta.json"
                meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
                lines = culprits.get(folder.name, {})
                culprit_lines = {
                    lines.get("failing_backward_line"),
                    lines.get("graph_built_line"),
                    *lines.get("forward_frames_in_script", ()),
                } - {None}
                found.append(
                    Case(
                        folder.name,
                        kind,
                        folder,
                        folder / script_name,
                        meta.get("shape", kind),
                        frozenset(culprit_lines),
                        meta.get("semantics") == "preserving",
                    )
                )
    return found


def _copy(case: Case, into: Path) -> Path:
    for sibling in case.folder.glob("*.py"):
        if sibling.name not in ("before.py", "fixed.py", "code.py"):
            shutil.copy(sibling, into / sibling.name)
    shutil.copy(case.script, into / SCRIPT)
    return into / SCRIPT


def _gradfix(*arguments: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradfix", *arguments], cwd=cwd, capture_output=True, text=True, timeout=300)


def _findings(folder: Path) -> list[dict]:
    shown = _gradfix("check", "--output-format", "json", "--no-cache", SCRIPT, cwd=folder)
    try:
        return json.loads(shown.stdout)
    except json.JSONDecodeError:
        return []


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.glob("*.py"))}


def judge(case: Case, runner: ScriptRunner, reference: dict[Path, str]) -> tuple[str, str]:
    """The outcome and one line of detail."""
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        script = _copy(case, folder)
        findings = _findings(folder)
        before = _snapshot(folder)
        _gradfix("fix", "--unsafe-fixes", "--no-cache", ".", cwd=folder)
        changed = _snapshot(folder) != before
        if case.kind == "look-alike":
            return ("changed", "rewritten") if changed else ("untouched", "")
        reported = any({finding.get("line"), *finding.get("related_lines", ())} & case.culprit_lines for finding in findings)
        codes = ",".join(sorted({finding.get("code", "?") for finding in findings}))
        if changed:
            run = runner.run(script, RunOptions(cwd=str(folder), timeout=120))
            if run.status != "ok":
                outcome = "reported" if reported else "missed"
                return outcome, f"rewritten, still fails: {run.describe()[:90]} [{codes}]"
            expected = reference.get(case.fixed)
            if case.kind == "silent":
                got = _SYMPTOM.findall(run.stdout)
                if expected is not None and got != _SYMPTOM.findall(expected):
                    return ("reported" if reported else "missed"), f"rewritten, symptom {got} not {_SYMPTOM.findall(expected)}"
            elif case.preserving and expected is not None:
                got, want = _CHECKSUM.findall(run.stdout), _CHECKSUM.findall(expected)
                if got[-1:] and want[-1:] and not _close(got[-1], want[-1]):
                    return ("reported" if reported else "missed"), f"rewritten, runs, CHECKSUM {got[-1]} not {want[-1]}"
            return "repaired", f"[{codes}]"
        if reported:
            return "reported", f"[{codes}]"
        return "missed", f"findings elsewhere [{codes}]" if findings else "no findings"


def _close(a: str, b: str) -> bool:
    try:
        return abs(float(a) - float(b)) <= 1e-4 * max(1.0, abs(float(b)))
    except ValueError:
        return False


def _reference_outputs(selected: list[Case], runner: ScriptRunner) -> dict[Path, str]:
    """What each accepted fix prints (its CHECKSUM, its symptom figure)."""
    outputs = {}
    for case in selected:
        if case.kind != "look-alike" and case.fixed.exists():
            with tempfile.TemporaryDirectory() as temporary:
                folder = Path(temporary)
                _copy(case, folder)
                shutil.copy(case.fixed, folder / SCRIPT)
                outputs[case.fixed] = runner.run(folder / SCRIPT, RunOptions(cwd=str(folder), timeout=120)).stdout
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--cases", nargs="*", help="only these scripts (folder names)")
    arguments = parser.parse_args()
    if not arguments.root.is_dir():
        sys.exit(f"{arguments.root}: not a folder (../shared/real-failures beside the checkout)")
    selected = [case for case in cases(arguments.root) if not arguments.cases or case.name in arguments.cases]
    tally: dict[str, Counter] = defaultdict(Counter)
    with ScriptRunner() as runner:
        reference = _reference_outputs(selected, runner)
        for case in selected:
            outcome, detail = judge(case, runner, reference)
            tally[(case.kind, case.shape)][outcome] += 1
            print(f"{case.kind:10} {case.name:58} {outcome:9} {detail}", flush=True)
    print()
    for kind, outcomes in (
        ("raises", ("repaired", "reported", "missed")),
        ("silent", ("repaired", "reported", "missed")),
        ("look-alike", ("untouched", "changed")),
    ):
        rows = sorted((shape, counts) for (k, shape), counts in tally.items() if k == kind)
        if not rows:
            continue
        print(f"{kind:28} " + " ".join(f"{o:>9}" for o in outcomes) + "     total")
        total = Counter()
        for shape, counts in rows:
            total.update(counts)
            print(f"  {shape:26} " + " ".join(f"{counts[o]:9}" for o in outcomes) + f" {sum(counts.values()):9}")
        n = sum(total.values())
        print(f"  {'all':26} " + " ".join(f"{total[o]:9}" for o in outcomes) + f" {n:9}")
        if kind != "look-alike":
            print(
                f"  repaired {total['repaired']}/{n} ({100 * total['repaired'] / n:.0f}%), "
                f"repaired + reported {total['repaired'] + total['reported']}/{n} "
                f"({100 * (total['repaired'] + total['reported']) / n:.0f}%)"
            )
        print()


if __name__ == "__main__":
    main()
