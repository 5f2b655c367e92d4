"""The pre-commit hooks, read with pre-commit's own manifest loader and run the way pre-commit runs
them: the entry, then the staged files its `types_or` picks, all at once."""

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import FIXTURES

clientlib = pytest.importorskip("pre_commit.clientlib", reason="pre-commit is not installed (it is in the test extra)")
identify = pytest.importorskip("identify.identify", reason="identify comes with pre-commit")

MANIFEST = Path(__file__).resolve().parents[1] / ".pre-commit-hooks.yaml"
DOUBLE = FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop"


def hooks() -> dict[str, dict]:
    return {hook["id"]: hook for hook in clientlib.load_manifest(str(MANIFEST))}


def run_hook(hook: dict, folder: Path, staged: list[str] | None = None) -> subprocess.CompletedProcess:
    """The hook on every file under ``folder`` (or only on those ``staged``), named relative to it,
    run from it (pre-commit runs from the repository's root)."""
    picked = [
        name
        for path in sorted(folder.rglob("*"))
        for name in [str(path.relative_to(folder))]
        if path.is_file() and identify.tags_from_path(str(path)) & set(hook["types_or"]) and (staged is None or name in staged)
    ]
    command, *options = shlex.split(hook["entry"])
    assert command == "gradfix"
    return subprocess.run([sys.executable, "-m", "gradfix", *options, *hook["args"], *picked], capture_output=True, text=True, cwd=folder)


def test_the_manifest_is_valid_and_runs_every_file_in_one_call():
    found = hooks()
    assert set(found) == {"gradfix-check", "gradfix-fix"}
    for hook in found.values():
        assert hook["language"] == "python" and hook["require_serial"] is True
        assert set(hook["types_or"]) == {"python", "pyi", "jupyter"}


def test_check_hook_fails_on_findings_in_scripts_and_notebooks(tmp_path):
    (tmp_path / "train.py").write_text((DOUBLE / "before.py").read_text())
    notebook = {
        "cells": [
            {
                "cell_type": "code",
                "metadata": {},
                "outputs": [],
                "execution_count": 1,
                "source": (DOUBLE / "before.py").read_text().splitlines(keepends=True),
            }
        ],
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "explore.ipynb").write_text(json.dumps(notebook))
    (tmp_path / "notes.txt").write_text("loss.backward( not python")
    result = run_hook(hooks()["gradfix-check"], tmp_path)
    assert result.returncode == 1, result.stderr
    assert "train.py:19:5: GF002" in result.stdout and "explore.ipynb:cell 1:19:5: GF002" in result.stdout
    assert "notes.txt" not in result.stdout + result.stderr


def test_fix_hook_fixes_and_stops_the_commit_once(tmp_path):
    script = tmp_path / "train.py"
    script.write_text((DOUBLE / "before.py").read_text())
    fix = hooks()["gradfix-fix"]
    first = run_hook(fix, tmp_path)
    assert first.returncode == 1, first.stderr  # a file changed: the user reviews it before committing
    assert script.read_text() == (DOUBLE / "after.py").read_text()
    assert run_hook(fix, tmp_path).returncode == 0


def test_the_hooks_keep_the_projects_exclusions_for_the_files_pre_commit_names(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.gradfix]\nextend-exclude = ["vendored"]\n')
    (tmp_path / "vendored").mkdir()
    vendored = tmp_path / "vendored" / "train.py"
    vendored.write_text((DOUBLE / "before.py").read_text())
    for hook in hooks().values():
        result = run_hook(hook, tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert vendored.read_text() == (DOUBLE / "before.py").read_text()


def test_a_file_staged_alone_is_checked_with_the_project_modules_it_imports(tmp_path):
    """Only train.py is staged; the helper it imports, which already backwards the loss, is read
    from disk, so the hook says what ``gradfix check .`` says; the fix hook applies safe fixes
    only, and this one is unsafe (the fixture's docstring says why): the file stays as it was."""
    case = FIXTURES / "gf001_duplicate_backward" / "unsafe_loss_helper_in_its_own_module"
    for name in ("before.py", "rdrop_loss.py"):
        (tmp_path / name).write_text((case / name).read_text())
    (tmp_path / ".git").mkdir()
    result = run_hook(hooks()["gradfix-check"], tmp_path, staged=["before.py"])
    assert result.returncode == 1 and "before.py:23:5: GF001" in result.stdout and "[unsafe fix]" in result.stdout, result.stdout + result.stderr
    assert run_hook(hooks()["gradfix-fix"], tmp_path, staged=["before.py"]).returncode == 1
    assert (tmp_path / "before.py").read_text() == (case / "before.py").read_text()
