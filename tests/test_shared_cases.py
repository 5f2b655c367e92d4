"""The runnable cases the product was conceived from (../shared/cases beside the project)."""

import shutil

import pytest
from typer.testing import CliRunner

from gradfix.cli.app import app
from gradfix.codemods.execution.runner import RunOptions
from gradfix.codemods.registry import rule_by_code

from .conftest import SHARED_CASES

pytestmark = pytest.mark.skipif(not SHARED_CASES.is_dir(), reason="../shared/cases is not beside this checkout")

# Scripts a rule covers, and the rule.
COVERED = {
    "gan_without_detach.py": "GF005",
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


# Silent bugs: the script runs; the rule's symptom (a measure of the run) shows it, and is gone after.
SILENT = {"loss_kept_for_logging.py": "GF007"}


@pytest.mark.parametrize("name", sorted(SILENT))
def test_silent_case_is_fixed_and_its_symptom_is_gone(name, tmp_path, runs):
    script = tmp_path / name
    shutil.copy(SHARED_CASES / "silent" / name, script)
    symptom = rule_by_code(SILENT[name]).SYMPTOM
    options = RunOptions(measure_graphs=symptom.measures_graphs)
    before = runs.run(script, options)
    shown, seen = symptom.shown_by(before)
    assert shown, seen
    result = CliRunner().invoke(app, ["fix", "--unsafe-fixes", str(script)])
    assert result.exit_code == 0, result.output
    assert f"{SILENT[name]}: 1" in result.stderr
    gone, seen = symptom.gone(before, runs.run(script, options))
    assert gone, seen


def test_silent_update_dedented_whole_after_the_loop_is_reported_and_left_as_it_is(tmp_path, runs):
    """zero_grad, backward and step all after the batch loop: one step per batch or one step of
    every batch's summed gradient, the code does not say which; GF008 reports it, rewriting nothing."""
    script = tmp_path / "backward_after_batch_loop.py"
    shutil.copy(SHARED_CASES / "silent" / script.name, script)
    shown, seen = rule_by_code("GF008").SYMPTOM.shown_by(runs.run(script))
    assert shown, seen
    result = CliRunner().invoke(app, ["fix", "--unsafe-fixes", str(script)])
    assert script.read_bytes() == (SHARED_CASES / "silent" / script.name).read_bytes()
    assert "GF008" in result.stdout + result.stderr and "the whole update" in result.stdout + result.stderr, result.output
