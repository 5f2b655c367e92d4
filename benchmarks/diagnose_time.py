"""How long `gradfix diagnose` takes per script, from a cold start (torch import included), and how
much autograd anomaly detection adds to a run.

Usage: python benchmarks/diagnose_time.py
"""

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gradfix.codemods.checker import check_file
from gradfix.codemods.engine import FixMode
from gradfix.codemods.registry import all_rules
from gradfix.codemods.execution.runner import RunOptions, ScriptRunner

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "examples").glob("*.py"))


def main() -> None:
    for script in SCRIPTS:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gradfix", "diagnose", str(script)], capture_output=True)
        print(f"gradfix diagnose {script.name}: {time.perf_counter() - start:.2f} s (cold, torch import included)")
    # Anomaly detection costs per training step, so measure it on the fixed examples, which run
    # every step instead of stopping at the second one.
    with tempfile.TemporaryDirectory() as folder, ScriptRunner() as runner:
        fixed = []
        for script in SCRIPTS:
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
                    result = runner.run(script, RunOptions(detect_anomaly=anomaly, max_steps=steps))
                    assert result.succeeded, result.describe()
                timings[anomaly] = (time.perf_counter() - start) / len(fixed)
            print(
                f"fixed examples, {steps:2} steps: {timings[False] * 1000:5.0f} ms without anomaly detection, "
                f"{timings[True] * 1000:5.0f} ms with it ({timings[True] / timings[False]:.2f}x)"
            )

if __name__ == "__main__":
    main()
