"""How long `gradfix diagnose` takes, against the script's own time.

On every case of ``../shared/real-failures`` (set-*/cases/*/before.py, with the files beside it):
the script's own run to its error (``python train.py``), then ``gradfix diagnose --fix
--unsafe-fixes train.py``, both from a cold start (interpreter, torch import, gradfix's runner
included), one after the other on the same machine. One line per case: what diagnose did, whether
the rewrite it wrote is proved safe, both times and the overhead; the median overhead last.

With --examples: how long `gradfix diagnose` takes on the README's examples, and how much autograd
anomaly detection adds to a run.

Usage: python benchmarks/diagnose_time.py [REAL_FAILURES_DIR] [--cases NAME ...] [--examples]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REAL_FAILURES = ROOT.parent / "shared" / "real-failures"
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
SCRIPT = "train.py"
_RULE = re.compile(r"^\s*rule: (GF\d+)", re.M)


def timed(command: list[str], folder: Path, timeout: float) -> tuple[float, subprocess.CompletedProcess | None]:
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        done = None
    return time.perf_counter() - start, done


def outcome(done: subprocess.CompletedProcess | None) -> str:
    """What ``diagnose --fix`` did, from its output: repaired (by a rule, or by the repair search,
    safe or unsafe), or not, and why."""
    if done is None:
        return "timed out"
    output = done.stdout + done.stderr
    if done.returncode == 0 and "\nfixed " in "\n" + output:
        if "chosen because" not in output:
            rule = _RULE.search(output)
            return f"repaired by {rule.group(1) if rule else 'a rule'}"
        return "repaired, safe" if "chosen because it runs clean and its gradients equal" in output else "repaired, unsafe"
    last = [line for line in output.splitlines() if line.strip()][-1:] or ["no output"]
    return f"not repaired (exit {done.returncode}): {last[0].strip()}"


def real_failures(root: Path, names: list[str]) -> None:
    overheads = []
    for before in sorted(root.glob("set-*/cases/*/before.py")):
        case = before.parent
        if names and case.name not in names:
            continue
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            shutil.copytree(case, folder, dirs_exist_ok=True)
            for kept_apart in ("fixed.py", "meta.json"):
                (folder / kept_apart).unlink(missing_ok=True)
            (folder / "before.py").rename(folder / SCRIPT)
            own, _ = timed([sys.executable, "-W", "ignore", SCRIPT], folder, 300)
            diagnosed, done = timed([sys.executable, "-m", "gradfix", "diagnose", "--fix", "--unsafe-fixes", SCRIPT], folder, 600)
        overheads.append(diagnosed - own)
        print(
            f"{case.parent.parent.name}/{case.name:62} {outcome(done)[:70]:70} "
            f"script {own:6.2f} s  diagnose {diagnosed:6.2f} s  overhead {diagnosed - own:+6.2f} s",
            flush=True,
        )
    if overheads:
        print(f"median overhead of diagnose --fix over the script's own run: {statistics.median(overheads):+.2f} s ({len(overheads)} cases)")


def examples() -> None:
    from gradfix.codemods.check import check_file
    from gradfix.codemods.report import FixMode
    from gradfix.codemods.execution.runner import RunOptions, ScriptRunner
    from gradfix.codemods.registry import all_rules

    for script in EXAMPLES:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gradfix", "diagnose", str(script)], capture_output=True)
        print(f"gradfix diagnose {script.name}: {time.perf_counter() - start:.2f} s (cold, torch import included)")
    # Anomaly detection costs per training step, so measure it on the fixed examples, which run
    # every step instead of stopping at the error.
    with tempfile.TemporaryDirectory() as folder, ScriptRunner() as runner:
        fixed = []
        for script in EXAMPLES:
            report = check_file(script, all_rules(), FixMode.SAFE)
            copy = Path(folder, script.name)
            copy.write_bytes(report.rewritten or report.original)
            fixed.append(copy)
        runner.run(fixed[0])
        for steps in (5, 50):
            timings = {}
            for anomaly in (False, True):
                start = time.perf_counter()
                for script in fixed:
                    result = runner.run(script, RunOptions(detect_anomaly=anomaly, max_optimizer_steps=steps))
                    assert result.succeeded, result.describe()
                timings[anomaly] = (time.perf_counter() - start) / len(fixed)
            print(
                f"fixed examples, {steps:2} steps: {timings[False] * 1000:5.0f} ms without anomaly detection, "
                f"{timings[True] * 1000:5.0f} ms with it ({timings[True] / timings[False]:.2f}x)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", type=Path, default=DEFAULT_REAL_FAILURES, help="the real-failures folder")
    parser.add_argument("--cases", nargs="*", default=[], help="only these cases (folder names)")
    parser.add_argument("--examples", action="store_true", help="time the README's examples and anomaly detection instead")
    arguments = parser.parse_args()
    if arguments.examples:
        examples()
    else:
        real_failures(arguments.root, arguments.cases)


if __name__ == "__main__":
    main()
