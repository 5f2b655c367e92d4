"""How much memory `gradfix check` takes for one file, by the file's size, and at gradfix's limits.

Generated files of 50 KB up to --max-kb, each checked by `gradfix check --no-cache -j 1` in a
process of its own: valid code, and the same code with a syntax error on its last line (what a
fork's pull request can push as easily). Three shapes of code: training code (the parts of
benchmarks/analysis_scaling.py: models, training functions, helpers, script cells), short
statements (`value_12 = value_11 * 2 + 1`) and the densest code Python has (`a;a;…`, a statement
in two bytes). Each file backwards a loss, so the prefilter does not skip it. Also LibCST's parse
alone, in a process of its own, and a notebook holding the code in one code cell. A file over
gradfix's limits (codemods/source.py, codemods/notebook.py) is refused before it is parsed: exit 2.

Then the largest files within the limits, checked and fixed (`fix --unsafe-fixes` on a copy): each
shape above, one name a line (`x`, the most lines) and `a;a;a;a` a line (both limits at once),
each ending with a loss computed before its loop (a fix to make); and a notebook of the training
code whose outputs fill it to its size limit.
Memory is the peak resident size of the process (MB), as the kernel counts it (`os.wait4`);
seconds are wall-clock.
Usage: python benchmarks/file_size_memory.py [--max-kb N] [--write FOLDER]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analysis_scaling import HEADER, part  # noqa: E402  (a sibling script, not a package)

from gradfix.codemods.notebook import MAX_NOTEBOOK_BYTES  # noqa: E402
from gradfix.codemods.source import over_size_limits  # noqa: E402

SIZES_KB = (50, 100, 200, 500, 1000, 2000, 5000)
GRADFIX = Path(sys.executable).with_name("gradfix")
TRAINING_TAIL = "\nloss = torch.zeros(1, requires_grad=True).sum()\nloss.backward()\n"
SYNTAX_ERROR = "broken = (\n"
HOISTED_LOSS = (Path(__file__).resolve().parents[1] / "tests/fixtures/gf003_forward_outside_loop/loss_hoisted/before.py").read_text()


def training_code(size: int) -> str:
    text, i = HEADER, 0
    while len(text) < size:
        text += part(i)
        i += 1
    return text


def short_statements(size: int) -> str:
    lines, total, i = [HEADER, "value_0 = 1\n"], len(HEADER), 1
    while total < size:
        lines.append(f"value_{i} = value_{i - 1} * 2 + 1\n")
        total += len(lines[-1])
        i += 1
    return "".join(lines) + TRAINING_TAIL


def densest(size: int) -> str:
    rows = max(1, (size - len(HEADER)) // 2000)
    return HEADER + DENSE_ROW * rows + TRAINING_TAIL


DENSE_ROW = "a;" * 999 + "a\n"  # a thousand statements


SHAPES = {"training": training_code, "short": short_statements, "densest": densest}


def notebook(code: str, outputs: list[dict] | None = None) -> str:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": outputs or [], "source": code.splitlines(keepends=True)}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)


def peak(command: list[str]) -> tuple[float, float, int]:
    """Peak resident MB, seconds and exit code of a command."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    return usage.ru_maxrss / 1024, time.perf_counter() - start, os.waitstatus_to_exitcode(status)


def gradfix(*args: str) -> str:
    megabytes, seconds, code = peak([str(GRADFIX), *args, "--no-cache", "-j", "1"])
    return f"{megabytes:8.0f} {seconds:7.1f} {code:4d}"


def parse_alone(path: Path) -> str:
    program = "import sys, libcst\ntry:\n    libcst.parse_module(open(sys.argv[1], 'rb').read())\nexcept Exception:\n    sys.exit(3)"
    megabytes, seconds, _ = peak([sys.executable, "-c", program, str(path)])
    return f"{megabytes:8.0f} {seconds:7.1f}"


def by_size(folder: Path, shapes: list[str], max_kb: int) -> None:
    print(f"{'shape':>8} {'KB':>5} {'lines':>7} | {'valid':^20} | {'syntax error':^20} | {'LibCST parse':^16} | {'notebook':^20}")
    for shape in shapes:
        for size in (kb for kb in SIZES_KB if kb <= max_kb):
            code = SHAPES[shape](size * 1000)
            valid, broken, cells = folder / f"{shape}_{size}.py", folder / f"{shape}_{size}_error.py", folder / f"{shape}_{size}.ipynb"
            valid.write_text(code)
            broken.write_text(code + SYNTAX_ERROR)
            cells.write_text(notebook(code))
            row = f"{shape:>8} {len(code) // 1000:5d} {code.count(chr(10)):7d}"
            print(
                f"{row} | {gradfix('check', str(valid))} | {gradfix('check', str(broken))} | {parse_alone(valid)} | {gradfix('check', str(cells))}",
                flush=True,
            )


def largest_within_limits(code: Callable[[int], str]) -> str:
    """``code(n)`` for the largest ``n`` whose code is within the limits."""
    low, high = 1, 1
    while not over_size_limits(code(high).encode()):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if not over_size_limits(code(middle).encode()) else (low, middle)
    return code(low)


AT_THE_LIMITS = {
    "training": lambda parts: HEADER + "".join(map(part, range(parts))),
    "short": lambda n: HEADER + "value_0 = 1\n" + "".join(f"value_{i} = value_{i - 1} * 2 + 1\n" for i in range(1, n)) + HOISTED_LOSS,
    "densest": lambda rows: "a = 1\n" + DENSE_ROW * rows + HOISTED_LOSS,
    "one name": lambda n: "x = 1\n" + "x\n" * n + HOISTED_LOSS,
    "a;a;a;a": lambda n: "a = 1\n" + "a;a;a;a\n" * n + HOISTED_LOSS,
}


def at_the_limits(folder: Path) -> None:
    print(f"{'shape':>18} {'KB':>5} {'lines':>7} | {'check':^20} | {'fix --unsafe-fixes':^20}")
    files = {name: largest_within_limits(code) for name, code in AT_THE_LIMITS.items()}
    training = files["training"]
    filling = MAX_NOTEBOOK_BYTES - len(notebook(training)) - 1000
    image = {"output_type": "display_data", "metadata": {}, "data": {"image/png": "A" * filling}}
    files["training notebook"] = notebook(training, [image])
    for name, text in files.items():
        path = folder / f"limits_{name.replace(' ', '_').replace(';', '')}{'.ipynb' if name.endswith('notebook') else '.py'}"
        path.write_text(text)
        copy = folder / f"fixed_{path.name}"
        shutil.copy(path, copy)
        print(
            f"{name:>18} {len(text) // 1000:5d} {text.count(chr(10)):7d} | {gradfix('check', str(path))} | {gradfix('fix', '--unsafe-fixes', str(copy))}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-kb", type=int, default=SIZES_KB[-1])
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    parser.add_argument("--write", type=Path, help="keep the generated files in this folder")
    options = parser.parse_args()
    folder = options.write or Path(tempfile.mkdtemp(prefix="gradfix-memory-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"gradfix --version alone: {peak([str(GRADFIX), '--version'])[0]:.0f} MB; columns: peak MB, seconds, exit code")
    by_size(folder, options.shapes.split(","), options.max_kb)
    print()
    at_the_limits(folder)


if __name__ == "__main__":
    main()
