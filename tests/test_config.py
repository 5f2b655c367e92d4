"""Where each file's settings come from (``codemods.config``)."""

import pytest
from typer.testing import CliRunner

from gradfix.cli.app import app

from .conftest import FIXTURES

DOUBLE = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "before.py").read_text()
IGNORING_THE_FINDINGS = '[tool.gradfix]\nignore = ["GF002", "GF010"]\n'


@pytest.mark.parametrize("git", ["folder", "file"])
def test_a_pyproject_above_the_git_work_tree_does_not_apply(tmp_path, git):
    """As ruff's project root: the search for settings stops at the folder holding ``.git`` (a file
    in a worktree or a submodule), so a home folder's or a CI work folder's never applies."""
    repository = tmp_path / "repository"
    (repository / "src").mkdir(parents=True)
    script = repository / "src" / "train.py"
    script.write_text(DOUBLE)
    (tmp_path / "pyproject.toml").write_text(IGNORING_THE_FINDINGS)
    cli = CliRunner()
    assert cli.invoke(app, ["check", str(script)]).exit_code == 0  # no work tree yet: the settings above apply
    if git == "folder":
        (repository / ".git").mkdir()
    else:
        (repository / ".git").write_text("gitdir: /elsewhere/.git/worktrees/repository\n")
    checked = cli.invoke(app, ["check", str(script)])
    assert checked.exit_code == 1 and "GF002" in checked.stdout
    (repository / "pyproject.toml").write_text(IGNORING_THE_FINDINGS)
    assert cli.invoke(app, ["check", str(script)]).exit_code == 0  # the work tree's own still applies
