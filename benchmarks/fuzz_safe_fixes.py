"""Differential fuzzing of the safe fixes at scale: thousands of generated training programs, each run
before and after `gradfix fix` (see tests/safe_fix_differential.py for what is checked). Prints how
many programs were generated and ran, the rewrites made per rule, and the failures by kind, with the
smallest failing program of each kind.

Usage: python benchmarks/fuzz_safe_fixes.py [EXAMPLES] [--seed N] [--failures FOLDER]
(--failures writes every failing program there, named by its kind, for minimising.)
"""

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradfix.codemods.execution.runner import ScriptRunner  # noqa: E402
from tests.safe_fix_differential import DID_NOT_RUN, judge  # noqa: E402
from tests.training_programs import training_programs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", type=int, nargs="?", default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--failures", type=Path)
    arguments = parser.parse_args()

    sources: set[str] = set()
    ran: Counter = Counter()
    rewrites: Counter = Counter()
    rewritten = compared = still_failing = 0
    failures: Counter = Counter()
    smallest_failure: dict[str, tuple[str, str]] = {}

    with ScriptRunner() as runner, tempfile.TemporaryDirectory(prefix="gradfix-fuzz-") as scratch:
        # Failures are counted, not raised: nothing to shrink, and the database would only replay them.
        @settings(
            max_examples=arguments.examples,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(training_programs())
        @seed(arguments.seed)
        def fuzz(program: str) -> None:
            nonlocal rewritten, compared, still_failing
            sources.add(program)
            verdict = judge(program, runner, Path(scratch))
            ran[verdict.ran] += 1
            rewrites.update(verdict.rewrites)
            rewritten += bool(verdict.rewrites)
            compared += verdict.compared
            still_failing += verdict.still_fails
            if verdict.failure:
                failures[verdict.failure] += 1
                if arguments.failures:
                    arguments.failures.mkdir(parents=True, exist_ok=True)
                    name = f"{verdict.failure.replace(' ', '_')}_{failures[verdict.failure]}.py"
                    detail = "".join(f"# {line}\n" for line in verdict.detail.splitlines()[:3])
                    (arguments.failures / name).write_text(detail + program)
                known = smallest_failure.get(verdict.failure)
                if known is None or len(program) < len(known[0]):
                    smallest_failure[verdict.failure] = (program, verdict.detail)

        start = time.perf_counter()
        fuzz()
        elapsed = time.perf_counter() - start

    generated = sum(ran.values())
    print(f"programs generated: {generated} ({len(sources)} distinct) in {elapsed:.0f} s")
    for kind in sorted(ran):
        print(f"  {kind}: {ran[kind]}")
    print(f"programs rewritten: {rewritten}; still failing with the second-backward error after the fix: {still_failing}")
    print(f"gradients compared (every fix keeps the maths): {compared}")
    print("rewrites per rule:")
    for code, count in sorted(rewrites.items()):
        print(f"  {code}: {count}")
    print(f"failures: {sum(failures.values())}")
    for kind, count in failures.most_common():
        source, detail = smallest_failure[kind]
        print(f"  {kind}: {count}\n    first line of the detail: {detail.splitlines()[0] if detail else ''}")
        print("    smallest program:\n" + "".join(f"      {line}\n" for line in source.splitlines()))
    if ran[DID_NOT_RUN] == generated:
        sys.exit("no generated program ran")


if __name__ == "__main__":
    main()
