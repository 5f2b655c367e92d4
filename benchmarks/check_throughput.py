"""Files per second for `gradfix check` over a tree, against a bare LibCST parse of the same files.

The tree is built from the fixtures: every fixture script (each contains `backward`, so each is
parsed and analysed), plus as many files without `backward` that the prefilter skips unparsed.
Usage: python benchmarks/check_throughput.py [COPIES]
"""

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import libcst as cst

from gradfix.codemods.engine import FixMode, check_files, collect_files
from gradfix.codemods.registry import all_rules

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
PLAIN = "import torch\n\n\ndef scale(x):\n    return x * 2\n" * 20


def build_tree(root: Path, copies: int) -> None:
    sources = sorted(FIXTURES.rglob("*.py"))
    for copy in range(copies):
        for index, source in enumerate(sources):
            target = root / f"copy{copy}" / f"{source.parent.parent.name}_{source.parent.name}_{source.name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
            (root / f"copy{copy}" / f"plain_{index}.py").write_text(PLAIN)


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    copies = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        build_tree(root, copies)
        files = collect_files([root]).files
        torch_files = [f for f in files if b"backward" in f.read_bytes()]
        rules = all_rules()
        print(f"tree: {len(files)} files, {len(torch_files)} mention backward")
        parse = timed(lambda: [cst.parse_module(f.read_bytes()) for f in torch_files])
        print(f"bare LibCST parse of those:  {len(torch_files) / parse:8.1f} files/s")
        for jobs in (1, os.cpu_count() or 1):
            seconds = timed(lambda jobs=jobs: list(check_files(files, rules, FixMode.NONE, jobs)))
            print(f"check, --jobs {jobs}:            {len(files) / seconds:8.1f} files/s ({seconds:.2f} s, "
                  f"{seconds / parse:.1f}x the bare parse)")
        seconds = timed(lambda: list(check_files(files, rules, FixMode.SAFE, os.cpu_count())))
        print(f"fix --diff, all cores:       {len(files) / seconds:8.1f} files/s")


if __name__ == "__main__":
    main()
