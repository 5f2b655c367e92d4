"""benchmarks/check_cost_parts.py turns off what it says it measures without: each part's
variant of a check differs from the whole check in that part's output alone."""

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import FIXTURES

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "check_cost_parts.py"
CASE = FIXTURES / "gf001_duplicate_backward" / "unsafe_loss_helper_in_its_own_module"
CROSS_FILE_FINDING = "train.py:23:5: GF001"  # read from the helper's module only
SYNTAX_ERROR = "broken.py:1: cannot parse"  # a file with no backward, which only Python's parse reads


@pytest.fixture
def tree(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "rdrop_loss.py").write_text((CASE / "rdrop_loss.py").read_text())
    (tmp_path / "train.py").write_text((CASE / "before.py").read_text())
    (tmp_path / "broken.py").write_text("def broken(:\n    pass\n")
    return tmp_path


def measured(tree: Path, *parts: str) -> str:
    command = [sys.executable, str(BENCHMARK), *(f"--measure={part}" for part in parts), "--measure-tree", "."]
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True, timeout=300)
    return done.stdout + done.stderr


@pytest.mark.parametrize(
    "parts, finds_cross_file, finds_syntax_error",
    [((), True, True), (("syntax",), True, False), (("project",), False, True), (("syntax", "project"), False, False)],
)
def test_each_part_turned_off_loses_its_output_alone(tree, parts, finds_cross_file, finds_syntax_error):
    said = measured(tree, *parts)
    assert (CROSS_FILE_FINDING in said, SYNTAX_ERROR in said) == (finds_cross_file, finds_syntax_error), said
