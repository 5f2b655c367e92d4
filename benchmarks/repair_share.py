"""What share of the failing scripts rebuilt from public reports the static `fix` repairs, what share
`diagnose --fix` repairs (its rule's rewrite, or the repair search where no rule proves one), and
the time `diagnose` (with its search) takes per script on a warm runner.

A script counts as repaired when the rewrite runs clean under the diagnosis's bounds (5 steps).

Usage: python benchmarks/repair_share.py [FIXTURE_ROOT]   (default: tests/fixtures)
"""

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gradfix.codemods.check import check_file
from gradfix.codemods.report import FixMode
from gradfix.codemods.execution.diagnose import diagnose, fix_and_rerun
from gradfix.codemods.execution.repair import repair
from gradfix.codemods.execution.runner import RunOptions, ScriptRunner
from gradfix.codemods.execution.verify import discover
from gradfix.codemods.registry import all_rules
from gradfix.codemods.symptoms import SECOND_BACKWARD

ROOT = Path(__file__).resolve().parents[1]
BOUNDS = RunOptions(max_steps=5, timeout=60)


def public_failing_scripts(root: Path) -> list[Path]:
    """``before.py`` / ``reported.py`` of fixtures whose first line is a report's URL and whose
    bug raises the second-backward error."""
    scripts = []
    for case in discover([root]):
        if case.kind == "ok" or case.rule.SYMPTOM is not SECOND_BACKWARD or case.missing_modules():
            continue
        script = case.file("before.py" if case.kind == "pair" else "reported.py")
        if script.read_text().startswith("# http"):
            scripts.append(script)
    return scripts


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "fixtures"
    scripts = public_failing_scripts(root)
    static_fixed = diagnose_fixed = searched = 0
    timings = []
    with tempfile.TemporaryDirectory() as folder, ScriptRunner() as runner:
        for index, original in enumerate(scripts):
            work = Path(folder, str(index))
            work.mkdir()
            script = work / "train.py"
            shutil.copy(original, script)
            report = check_file(script, all_rules(), FixMode.UNSAFE)
            if report.rewritten is not None:
                fixed = work / "static.py"
                fixed.write_bytes(report.rewritten)
                static_fixed += runner.run(fixed, BOUNDS).succeeded
            start = time.perf_counter()
            diagnosis = diagnose(script, runner, BOUNDS)
            outcome = "not diagnosed"
            if diagnosis.fix is not None:
                outcome = "rule" if fix_and_rerun(diagnosis, runner, BOUNDS).succeeded else "rule fix fails"
            elif diagnosis.second_backward:
                result = repair(diagnosis, runner, BOUNDS)
                searched += 1
                chosen = result.chosen
                outcome = "no candidate" if chosen is None else ("search (safe)" if chosen.safe else "search (unsafe)")
            timings.append(time.perf_counter() - start)
            diagnose_fixed += outcome in ("rule", "search (safe)", "search (unsafe)")
            print(f"{timings[-1]:6.1f} s  {outcome:16} {original.relative_to(root)}")
    total = len(scripts)
    print(f"\n{total} failing scripts rebuilt from public reports")
    print(f"static `fix --unsafe-fixes` repairs {static_fixed} ({static_fixed / total:.0%})")
    print(f"`diagnose --fix` repairs {diagnose_fixed} ({diagnose_fixed / total:.0%}); {searched} needed the search")
    print(f"diagnose per script (warm runner): median {statistics.median(timings):.1f} s, max {max(timings):.1f} s")


if __name__ == "__main__":
    main()
