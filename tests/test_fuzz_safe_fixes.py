"""Differential fuzzing of the safe fixes: generated training programs (tests/training_programs.py)
are run before and after `gradfix fix`; a safe fix must give code that compiles, that fixing again
leaves alone, that runs wherever the original ran (or ran with retain_graph=True), and, for the
fixes that keep the maths, the same gradients at every optimizer step to 1e-6.

A bounded, derandomized number of examples runs here; benchmarks/fuzz_safe_fixes.py runs thousands.
"""

import tempfile
from pathlib import Path

from hypothesis import event, given, settings

from .safe_fix_differential import judge
from .training_programs import training_programs


@settings(max_examples=50, deadline=None, derandomize=True, database=None)
@given(program=training_programs())
def test_safe_fixes_keep_generated_programs_running(program: str, runs):
    with tempfile.TemporaryDirectory(prefix="gradfix-fuzz-") as scratch:
        verdict = judge(program, runs.runner, Path(scratch))
    event(verdict.ran)
    for code in verdict.rewrites:
        event(f"rewritten by {code}")
    assert not verdict.failure, f"{verdict}\n--- generated program ---\n{program}"
