"""The runnable cases the product was conceived from (../shared/cases beside the project)."""

import shutil

import pytest
from typer.testing import CliRunner

from gradfix.cli.app import app

from .conftest import SHARED_CASES

pytestmark = pytest.mark.skipif(not SHARED_CASES.is_dir(), reason="../shared/cases is not beside this checkout")

# Scripts a rule covers, and the rule; gan_without_detach needs a rule gradfix does not have yet.
COVERED = {
    "double_backward.py": "GF001",
    "shared_trunk_two_losses.py": "GF002",
    "hoisted_forward.py": "GF003",
    "unrolled_buffer.py": "GF004",
    "stored_hidden_states.py": "GF004",
}


def _scripts(kind):
    return sorted((SHARED_CASES / kind).glob("*.py")) if SHARED_CASES.is_dir() else []


@pytest.mark.parametrize("name", sorted(COVERED))
def test_covered_raising_case_is_fixed_and_then_runs(name, tmp_path, runs):
    script = tmp_path / name
    shutil.copy(SHARED_CASES / "raises" / name, script)
    assert runs.run(script).status == "error"
    result = CliRunner().invoke(app, ["fix", str(script)])
    assert result.exit_code == 0, result.output
    assert f"{COVERED[name]}: 1" in result.stderr
    outcome = runs.run(script)
    assert outcome.status == "ok", outcome.describe()


@pytest.mark.parametrize("script", _scripts("correct"), ids=lambda p: p.name)
def test_correct_case_is_left_byte_identical(script, tmp_path):
    copy = tmp_path / script.name
    shutil.copy(script, copy)
    result = CliRunner().invoke(app, ["fix", str(copy)])
    assert result.exit_code == 0
    assert copy.read_bytes() == script.read_bytes()
