"""Fixture executions per second in the warm runner, against a cold `python script.py`.

Usage: python benchmarks/fixture_executions.py
"""

import subprocess
import sys
import time
from pathlib import Path

from gradfix.codemods.execution.runner import ScriptRunner

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def main() -> None:
    scripts = sorted(FIXTURES.rglob("*.py"))
    with ScriptRunner() as runner:
        start = time.perf_counter()
        runner.run(scripts[0])
        warmup = time.perf_counter() - start
        start = time.perf_counter()
        for script in scripts:
            runner.run(script)
        warm = time.perf_counter() - start
    print(f"fork server start (imports torch once): {warmup:.2f} s")
    print(f"warm runner: {len(scripts)} fixture scripts in {warm:.2f} s = {len(scripts) / warm:.1f} executions/s")
    sample = scripts[:5]
    start = time.perf_counter()
    for script in sample:
        subprocess.run([sys.executable, str(script)], capture_output=True)
    cold = (time.perf_counter() - start) / len(sample)
    print(f"cold `python script.py`: {1 / cold:.2f} executions/s ({cold:.2f} s each, {len(sample)} scripts)")


if __name__ == "__main__":
    main()
