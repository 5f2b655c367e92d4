"""How long `gradfix check` takes on real trees, cold and with its cache, against parsing alone.

For each tree (../shared/corpus when it exists, and every folder given), in one run: gradfix cold
(an empty cache) and warm (the cache of the cold run, nothing changed) on JOBS processes; a bare
LibCST parse, Python's `ast.parse` and gradfix's skeleton (built from `ast.parse`, what the
analysis reads first) of the files gradfix parses (those that pass its prefilter), in one process
with the cycle collector off, as during a check; TorchFix, when the `torchfix` command is
installed. Times are wall-clock seconds, with ratios to the bare LibCST parse; memory is the peak
resident size of the largest process.
Usage: python benchmarks/check_speed.py [--jobs N] [TREE...]
TorchFix pins an older LibCST: install it in a virtualenv of its own and put that environment's
`torchfix` on PATH (after this Python's), e.g. `PATH=$PATH:/tmp/torchfix-bin`.
"""

import argparse
import ast
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def run(command: list[str]) -> tuple[float, float]:
    """Seconds and peak memory (MB) of a command and the processes it waited for."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        sys.exit(f"{' '.join(command)} failed (exit {os.waitstatus_to_exitcode(status)})")
    return seconds, usage.ru_maxrss / 1024


def timed(action) -> float:
    """Seconds of ``action`` with the cycle collector off, as a check defers it while it parses
    and analyses a file (its objects are freed by reference counting)."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        action()
        return time.perf_counter() - start
    finally:
        gc.enable()


def parse_times(tree: Path) -> None:
    """Print the number of files gradfix checks and parses, and the seconds of a LibCST parse, of
    an ``ast.parse`` and of the skeleton of those it parses."""
    import libcst as cst

    from gradfix.codemods.source import decoded, may_backward
    from gradfix.codemods.files import collect_files
    from gradfix.codemods.parse import build_skeleton

    files = collect_files([tree]).files
    parsed = [source for source in (path.read_bytes() for path in files) if may_backward(source)]
    libcst_parse = timed(lambda: [cst.parse_module(source) for source in parsed])
    python_parse = timed(lambda: [ast.parse(source) for source in parsed])
    print(len(files), len(parsed), libcst_parse, python_parse, timed(lambda: [build_skeleton(*decoded(source, "")) for source in parsed]))


def measure(tree: Path, jobs: int) -> None:
    # Everything runs in child processes of this small one (which imports neither LibCST nor
    # gradfix): a child's peak memory counts the size of the process that forked it.
    files, parsed, *seconds = subprocess.run(
        [sys.executable, __file__, "--parse-times", str(tree)], capture_output=True, text=True, check=True
    ).stdout.split()
    libcst_parse, python_parse, skeleton = map(float, seconds)
    print(f"\n{tree}: {files} files, {parsed} pass the prefilter and are parsed")
    rows = [
        ("LibCST parse (1 process)", libcst_parse, None),
        ("ast.parse (1 process)", python_parse, None),
        ("skeleton (1 process)", skeleton, None),
    ]
    with tempfile.TemporaryDirectory() as cache:
        gradfix = [sys.executable, "-m", "gradfix", "check", "--jobs", str(jobs), "--cache-dir", cache, str(tree)]
        rows.append((f"gradfix cold ({jobs} processes)", *run(gradfix)))
        rows.append((f"gradfix warm ({jobs} processes)", *run(gradfix)))
    if shutil.which("torchfix"):
        rows.append(("TorchFix", *run(["torchfix", str(tree)])))
    torchfix = next((seconds for name, seconds, _ in rows if name == "TorchFix"), None)
    for name, seconds, memory in rows:
        peak = f"  peak {memory:6.0f} MB" if memory is not None else ""
        faster = f"  TorchFix/this {torchfix / seconds:5.1f}x" if torchfix else ""
        print(f"  {name:30} {seconds:7.2f} s  {seconds / libcst_parse:6.2f}x the LibCST parse{peak}{faster}")
    if not shutil.which("torchfix"):
        print("  TorchFix                       not installed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--parse-times", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("trees", nargs="*", type=Path)
    options = parser.parse_args()
    if options.parse_times:
        return parse_times(options.parse_times)
    trees = ([CORPUS] if CORPUS.is_dir() else []) + options.trees
    if not trees:
        sys.exit(f"{CORPUS} is absent: name a tree to measure")
    for tree in trees:
        measure(tree, options.jobs)


if __name__ == "__main__":
    main()
