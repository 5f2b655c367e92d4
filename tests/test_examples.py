"""The README's first command: every example fails as shipped and runs after `gradfix fix`."""

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli.app import app

EXAMPLES = sorted((Path(__file__).parents[1] / "examples").glob("*.py"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_fails_then_runs_after_fix(example, tmp_path, runs):
    script = tmp_path / example.name
    shutil.copy(example, script)
    before = runs.run(script)
    assert before.status == "error" and "backward through the graph a second time" in before.error_message
    result = CliRunner().invoke(app, ["fix", str(script)])
    assert result.exit_code == 0, result.output
    after = runs.run(script)
    assert after.status == "ok", after.describe()
