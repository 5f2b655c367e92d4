"""What a ruff user expects of gradfix's command line (issue 39, item 5): `check` with no path,
`check --fix`, `--add-noqa`, `--show-settings`/`--show-files`, `-o`, `-q`, `--select ALL`, `-V`,
`rule`, shell completion, "Would fix" under `--diff`, SARIF regions and rule links, plain-text
explanations, errors in gradfix's words, `--watch` totals, dangling links in a walk."""

import re
import sys

import pytest
from typer.testing import CliRunner

from gradfix.cli import main
from gradfix.cli.app import app

from .conftest import FIXTURES

ROOT = FIXTURES.parents[1]
DOUBLE = (FIXTURES / "separate_backwards" / "shared_trunk_for_loop" / "before.py").read_text()
DOUBLE_FIXED = (FIXTURES / "separate_backwards" / "shared_trunk_for_loop" / "after.py").read_text()
CLEAN = (FIXTURES / "separate_backwards" / "ok_two_independent_networks" / "ok.py").read_text()
FINDING_LINE = "    loss_reg.backward()\n"  # line 19 of DOUBLE, where its GF002 finding is
# https://semver.org's regular expression for a version
SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


def cli(*args, **kwargs):
    return CliRunner().invoke(app, [str(a) for a in args], env={"GITHUB_STEP_SUMMARY": None, "GITHUB_OUTPUT": None}, **kwargs)


def run_main(monkeypatch, capsys, *args):
    """``gradfix`` as its entry point runs it: the exit status and what it printed."""
    monkeypatch.setattr(sys, "argv", ["gradfix", *map(str, args)])
    with pytest.raises(SystemExit) as exit_:
        main()
    printed = capsys.readouterr()
    return exit_.value.code, printed.out, printed.err


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_dangling_link_found_by_a_walk_is_skipped_with_a_note(tmp_path):
    write(tmp_path / "train.py", CLEAN)
    (tmp_path / "gone.py").symlink_to(tmp_path / "moved_away.py")
    result = cli("check", tmp_path)
    assert result.exit_code == 0, result.output
    assert f"warning: {tmp_path / 'gone.py'}: a dangling symbolic link (to {tmp_path / 'moved_away.py'}): skipped" in result.stderr
    assert "No findings in 1 file(s)." in result.stderr
    named = cli("check", tmp_path / "gone.py")  # named on the command line, it is an error still
    assert named.exit_code == 2 and "no such file or directory" in named.stderr


# check --fix, --add-noqa --------------------------------------------------------------------------
