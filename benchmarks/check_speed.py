"""How long `gradfix check` takes on real trees, cold and with its cache, against parsing alone.

For each tree (../shared/corpus when it exists, and every folder given), in one run: gradfix cold
(an empty cache) and warm (the cache of the cold run, nothing changed) on JOBS processes; a bare
LibCST parse, Python's `ast.parse` and gradfix's skeleton (built from `ast.parse`, what the
analysis reads first) of the files gradfix parses (those that pass its prefilter), in one process
with the cycle collector off, as during a check; TorchFix, when the `torchfix` command is
installed. Times are wall-clock seconds, with ratios to the bare LibCST parse, and CPU seconds (all
processes: what a busy machine does not inflate); memory is the peak resident size of the largest
process. Also one file of the tree checked alone, warm (what pre-commit and an editor pay).
With --baseline PYTHON (the Python of an environment where another gradfix is installed, e.g. the
0.1.0 commit's checkout, `pip install -e` in a virtualenv of its own), the same runs with that
gradfix, and this one's CPU over the baseline's: a regression shows as a ratio over 1. gradfix's
CPU is also given per 1,000 lines of the files it checks. With --repeat N, each gradfix run is made
N times (this gradfix's and the baseline's in turn, so a machine whose load changes weighs on both)
and the medians are printed: on a shared machine, compare CPU seconds, not wall time.
Usage: python benchmarks/check_speed.py [--jobs N] [--repeat N] [--baseline PYTHON] [TREE...]
TorchFix pins an older LibCST: install it in a virtualenv of its own and put that environment's
`torchfix` on PATH (after this Python's), e.g. `PATH=$PATH:/tmp/torchfix-bin`.
"""

import argparse
import ast
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def run(command: list[str], cwd: Path | None = None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak memory (MB) of a command and the processes it waited for."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        sys.exit(f"{' '.join(command)} failed (exit {os.waitstatus_to_exitcode(status)})")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


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
    """Print the number of files gradfix checks and parses, the lines of those it checks, the
    seconds of a LibCST parse, of an ``ast.parse`` and of the skeleton of those it parses, and the
    largest of them."""
    import libcst as cst

    from gradfix.codemods.source import decoded, may_backward
    from gradfix.codemods.files import collect_files
    from gradfix.codemods.skeleton import build_skeleton

    files = collect_files([tree]).files
    lines = sum(path.read_bytes().count(b"\n") for path in files)
    parsed_files = [path for path in files if may_backward(path.read_bytes())]
    parsed = [path.read_bytes() for path in parsed_files]
    libcst_parse = timed(lambda: [cst.parse_module(source) for source in parsed])
    python_parse = timed(lambda: [ast.parse(source) for source in parsed])
    skeleton = timed(lambda: [build_skeleton(*decoded(source, "")) for source in parsed])
    largest = max(parsed_files, key=lambda path: path.stat().st_size)
    print(len(files), len(parsed), lines, libcst_parse, python_parse, skeleton, largest)


def gradfix_runs(python: str, tree: Path, jobs: int, one_file: Path) -> list[tuple[str, float, float, float]]:
    """Cold, warm, and one file warm, with the gradfix of ``python``."""
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        gradfix = [python, "-m", "gradfix", "check", "--exit-zero", "--jobs", str(jobs), "--cache-dir", cache]
        rows.append((f"cold ({jobs} processes)", *run([*gradfix, str(tree)])))
        rows.append((f"warm ({jobs} processes)", *run([*gradfix, str(tree)])))
        run([*gradfix, str(one_file)])
        rows.append(("one file, warm", *run([*gradfix, str(one_file)])))
    return rows


def median_runs(runs: list[list[tuple[str, float, float, float]]]) -> list[tuple[str, float, float, float]]:
    """Each row's median wall, CPU and memory over repeated ``gradfix_runs``."""
    return [(rows[0][0], *(statistics.median(column) for column in list(zip(*rows))[1:])) for rows in zip(*runs)]


def measure(tree: Path, jobs: int, baseline: str | None, repeat: int) -> None:
    # Everything runs in child processes of this small one (which imports neither LibCST nor
    # gradfix): a child's peak memory counts the size of the process that forked it.
    files, parsed, lines, *seconds, largest = subprocess.run(
        [sys.executable, __file__, "--parse-times", str(tree)], capture_output=True, text=True, check=True
    ).stdout.split(maxsplit=6)
    libcst_parse, python_parse, skeleton = map(float, seconds)
    one_file = Path(largest.strip())
    thousands = int(lines) / 1000
    print(f"\n{tree}: {files} files ({int(lines):,} lines), {parsed} pass the prefilter and are parsed")
    rows = [
        ("LibCST parse (1 process)", libcst_parse, None),
        ("ast.parse (1 process)", python_parse, None),
        ("skeleton (1 process)", skeleton, None),
    ]
    if shutil.which("torchfix"):
        rows.append(("TorchFix", *run(["torchfix", str(tree)])[::2]))
    for name, seconds, memory in rows:
        peak = f"  peak {memory:6.0f} MB" if memory is not None else ""
        print(f"  {name:30} {seconds:7.2f} s  {seconds / libcst_parse:6.2f}x the LibCST parse{peak}")
    torchfix = next((seconds for name, seconds, _ in rows if name == "TorchFix"), None)
    mine_runs, baseline_runs = [], []
    for _ in range(repeat):
        mine_runs.append(gradfix_runs(sys.executable, tree, jobs, one_file))
        if baseline:
            baseline_runs.append(gradfix_runs(baseline, tree, jobs, one_file))
    mine = median_runs(mine_runs)
    theirs = median_runs(baseline_runs) if baseline else [None] * len(mine)
    medians = f", medians of {repeat} runs" if repeat > 1 else ""
    print(f"  gradfix (one file: {one_file.relative_to(tree)}, the largest that is parsed{medians})")
    for (name, seconds, cpu, memory), other in zip(mine, theirs):
        line = f"    {name:26} {seconds:7.2f} s  CPU {cpu:7.2f} s  peak {memory:6.0f} MB"
        if not name.startswith("one file"):
            line += f"  CPU/1k lines {cpu / thousands:6.3f} s"
        if torchfix and name.startswith("cold"):
            line += f"  TorchFix/this {torchfix / seconds:5.1f}x"
        if other is not None:
            line += f"  | baseline {other[1]:7.2f} s  CPU {other[2]:7.2f} s  peak {other[3]:6.0f} MB  CPU this/baseline {cpu / other[2]:4.2f}x"
        print(line)
    if not shutil.which("torchfix"):
        print("  TorchFix                       not installed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--baseline", help="the Python of an environment with another gradfix installed")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each gradfix measurement (medians printed)")
    parser.add_argument("--parse-times", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("trees", nargs="*", type=Path)
    options = parser.parse_args()
    if options.repeat < 1:
        parser.error("--repeat must be at least 1")
    if options.parse_times:
        return parse_times(options.parse_times)
    trees = ([CORPUS] if CORPUS.is_dir() else []) + options.trees
    if not trees:
        sys.exit(f"{CORPUS} is absent: name a tree to measure")
    for tree in trees:
        measure(tree, options.jobs, options.baseline, options.repeat)


if __name__ == "__main__":
    main()
