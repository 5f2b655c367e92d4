"""ruff's lint rules (pyproject.toml's [tool.ruff]) hold for the project's own code."""

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
