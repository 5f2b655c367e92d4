"""What two parts of a cold `gradfix check` cost, each turned off in turn: the parts the 0.1.0
commit did not have, which issue 41's ratio to that commit counts.

- The syntax check of every file: a file whose text cannot backward is not parsed by LibCST, but
  Python parses it, so that a file Python cannot parse never reads as clean.
- The project's modules: the summaries of the functions and classes a file imports from the
  project, read from disk (the import scan, the analysis of each module for its exports, and the
  check again of a file whose project turns out not to be empty).

For each tree, CPU seconds (all processes) of a cold check on one process (`--jobs 1 --no-cache`),
whole, without each part, and without both; with --baseline PYTHON, the same check with the gradfix
installed there (the 0.1.0 commit's), and each row's ratio to it. Medians of --repeat runs, taken in
turn. A part is turned off by replacing, in the measured process, the function that does it
(`--measure PART TREE` runs that process, and prints what gradfix prints).
Usage: python benchmarks/check_cost_parts.py [--repeat N] [--baseline PYTHON] TREE...
"""

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

PARTS = {
    "whole": (),
    "without the syntax check": ("syntax",),
    "without the project's modules": ("project",),
    "without both": ("syntax", "project"),
}


def turn_off(part: str) -> None:
    """Replace what does ``part`` in gradfix, in this process."""
    if part == "syntax":
        from gradfix.codemods import source

        source._parses = lambda code: True
    elif part == "project":
        from gradfix.codemods import project, run

        run.modules_imported = lambda modules, files: []
        project.ProjectModules.project_for = lambda self, here, data: {}
    else:
        raise ValueError(part)


def measured(parts: list[str], tree: str) -> None:
    """A cold check of ``tree`` on one process, with ``parts`` turned off."""
    for part in parts:
        turn_off(part)
    from gradfix.cli.app import run

    sys.argv = ["gradfix", "check", "--no-cache", "--jobs", "1", "--exit-zero", tree]
    run()


def cpu(command: list[str]) -> float:
    """CPU seconds of ``command`` and the processes it waited for."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) not in (0, 2):  # (2: some file could not be checked, and the rest were)
        sys.exit(f"{' '.join(command)} failed (exit {os.waitstatus_to_exitcode(status)})")
    return usage.ru_utime + usage.ru_stime


def measure(tree: Path, repeat: int, baseline: str | None) -> None:
    commands = {
        name: [sys.executable, __file__, *(f"--measure={part}" for part in parts), "--measure-tree", str(tree)] for name, parts in PARTS.items()
    }
    if baseline:
        commands["baseline"] = [baseline, "-m", "gradfix", "check", "--no-cache", "--jobs", "1", "--exit-zero", str(tree)]
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeat):
        for name, command in commands.items():
            seconds[name].append(cpu(command))
    medians = {name: statistics.median(runs) for name, runs in seconds.items()}
    print(f"\n{tree}: cold check, 1 process, CPU seconds (medians of {repeat})")
    for name, value in medians.items():
        ratio = f"  {value / medians['baseline']:4.2f}x the baseline" if baseline and name != "baseline" else ""
        print(f"  {name:32} {value:7.2f} s{ratio}")
    whole = medians["whole"]
    for name in list(PARTS)[1:3]:
        print(f"  cost of {name.removeprefix('without '):28} {whole - medians[name]:7.2f} s ({(whole - medians[name]) / whole:4.0%} of the whole)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement (medians printed)")
    parser.add_argument("--baseline", help="the Python of an environment with another gradfix installed")
    parser.add_argument("--measure", action="append", default=[], choices=["syntax", "project"], help=argparse.SUPPRESS)
    parser.add_argument("--measure-tree", help=argparse.SUPPRESS)
    parser.add_argument("trees", nargs="*", type=Path)
    options = parser.parse_args()
    if options.measure_tree:
        return measured(options.measure, options.measure_tree)
    if options.repeat < 1:
        parser.error("--repeat must be at least 1")
    if not options.trees:
        parser.error("name a tree to measure")
    for tree in options.trees:
        measure(tree, options.repeat, options.baseline)


if __name__ == "__main__":
    main()
