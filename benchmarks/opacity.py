"""The metamorphic opacity check on everything: every fixture and every generated program
(tests/independent_programs.py) that gets a safe rewrite, with each opaque construct of
tests/opaque_constructs.py written after its first backward. A rule whose obligations the
construct bears on must no longer rewrite it safely.

Prints, per construct, the programs tried and those still safely rewritten by a rule that
declares the obligation (each a failure, named); exits 1 when there is one.

Usage: python benchmarks/opacity.py [PROGRAMS] [--first-seed N]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gradfix.codemods.check import check_source  # noqa: E402
from gradfix.codemods.registry import all_rules, rule_by_code  # noqa: E402
from gradfix.codemods.report import FixMode  # noqa: E402
from tests.independent_programs import generate  # noqa: E402
from tests.opaque_constructs import OPAQUE_CONSTRUCTS, insertable, with_construct  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", type=int, nargs="?", default=300)
    parser.add_argument("--first-seed", type=int, default=0)
    arguments = parser.parse_args()
    sources = [(str(path.relative_to(FIXTURES)), path.read_text(encoding="utf-8")) for path in sorted(FIXTURES.glob("*/*/before.py"))]
    sources += [(f"seed {seed}", generate(seed).source) for seed in range(arguments.first_seed, arguments.first_seed + arguments.programs)]
    tried: Counter = Counter()
    failures: list[str] = []
    safely_fixed = 0
    for name, source in sources:
        if not insertable(source):
            continue
        fixed = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py").fixed
        codes = sorted({finding.code for finding in fixed})
        if not codes:
            continue
        safely_fixed += 1
        for construct, (_, _, obligation) in OPAQUE_CONSTRUCTS.items():
            bearing = [code for code in codes if obligation in rule_by_code(code).OBLIGATIONS]
            if not bearing:
                continue
            tried[construct] += 1
            variant = with_construct(source, construct)
            still = check_source(variant.encode(), all_rules(), FixMode.SAFE, "train.py").fixed
            for finding in still:
                if finding.code in bearing:
                    failures.append(f"{name}: {construct}: {finding.render()}")
    print(f"{len(sources)} programs, {safely_fixed} with a safe rewrite")
    for construct in OPAQUE_CONSTRUCTS:
        failed = sum(f": {construct}: " in failure for failure in failures)
        print(f"  {construct:32} tried {tried[construct]:5}  still safe {failed}")
    for failure in failures:
        print("FAIL", failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
