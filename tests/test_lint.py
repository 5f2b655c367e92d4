"""ruff's lint rules and formatting (pyproject.toml's [tool.ruff]) hold for the project's own code, and
mypy's strict checks ([tool.mypy]) for its plain layer."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_ruff_finds_nothing():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "codemods", "cli", "tests", "benchmarks", "docs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_leaves_the_code_as_it_is():
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "codemods", "cli", "tests", "benchmarks", "docs", "gradfix"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_passes_on_the_plain_layer():
    from .test_layers import PACKAGES, PLAIN_LAYER

    files = sorted(str(PACKAGES["gradfix.codemods"] / f"{module.rpartition('.')[2]}.py") for module in PLAIN_LAYER)
    result = subprocess.run([sys.executable, "-m", "mypy", *files], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
