"""The Action's list of changed files is unambiguous whatever the names."""

import os

from typer.testing import CliRunner

from gradfix.cli.app import app
from gradfix.codemods import files

from .conftest import FIXTURES
from .test_pull_request import read_step_outputs

PAIR = FIXTURES / "separate_backwards" / "shared_trunk_for_loop"
BEFORE, AFTER = (PAIR / "before.py").read_bytes(), (PAIR / "after.py").read_bytes()


def cli(*args, env=None):
    return CliRunner().invoke(app, [*map(str, args[:1]), "--no-cache", *map(str, args[1:])], env=env)


# the Action's changed-files output --------------------------------------------------------------
def test_changed_files_quotes_a_name_that_holds_a_newline_as_git_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("a\nb.py", 'say "hi".py', "train.py"):
        (tmp_path / name).write_bytes(BEFORE)
    outputs = tmp_path / "github_output"
    outputs.write_text("")
    result = cli("fix", "--output-format", "github", ".", env={"GITHUB_OUTPUT": str(outputs), "GITHUB_STEP_SUMMARY": None})
    assert result.exit_code == 0, result.output
    assert read_step_outputs(outputs.read_text())["changed-files"].split("\n") == ['"a\\nb.py"', '"say \\"hi\\".py"', "train.py"]


def test_path_lines_writes_every_name_unambiguously():
    names = ["train.py", "a\nb.py", "tab\there.py", "back\\slash.py", "é.py", os.fsdecode(b"latin\xe9.py"), "bell\x07.py", "del\x7f.py"]
    assert files.path_lines(names).split("\n") == [
        "train.py",
        '"a\\nb.py"',
        '"tab\\there.py"',
        '"back\\\\slash.py"',
        "é.py",
        '"latin\\351.py"',
        '"bell\\a.py"',
        '"del\\177.py"',
    ]
