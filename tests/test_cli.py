"""The command-line contract: output formats and exit codes, including bad input."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from gradfix.cli import check_commands
from gradfix.cli import main, render
from gradfix.cli.app import app
from gradfix.codemods.config import find_config
from gradfix.codemods.registry import all_rules

from .conftest import FIXTURES

DOUBLE = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "before.py").read_text()
DOUBLE_FIXED = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "after.py").read_text()
CLEAN = (FIXTURES / "gf002_separate_backwards" / "ok_two_independent_networks" / "ok.py").read_text()
REPORTED = (FIXTURES / "gf003_forward_outside_loop" / "input_rebound_in_loop" / "reported.py").read_text()


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args])

    return invoke


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_check_reports_findings_and_exits_1(cli, tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    result = cli("check", script)
    assert result.exit_code == 1
    line = result.stdout.strip().splitlines()[0]
    assert line.startswith(f"{script}:19:5: GF002 ")
    assert script.read_text() == DOUBLE


def test_check_clean_exits_0(cli, tmp_path):
    result = cli("check", write(tmp_path / "ok.py", CLEAN))
    assert result.exit_code == 0
    assert result.stdout == ""


def test_check_json_output(cli, tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    result = cli("check", "--output-format", "json", script)
    assert result.exit_code == 1
    records = json.loads(result.stdout)
    assert [(r["code"], r["line"], r["fix"]) for r in records] == [("GF002", 19, "safe")]
    assert (records[0]["column"], records[0]["end_line"], records[0]["end_column"]) == (5, 19, 24)  # end exclusive
    broken = write(tmp_path / "broken.py", "loss.backward(\n")
    both = json.loads(cli("check", "--output-format", "json", script, broken).stdout)
    message = f"{broken}:1: cannot parse: '(' was never closed"
    assert both[-1] == {"path": str(broken), "cell": None, "line": 1, "code": "error", "message": message}
    missing = json.loads(cli("check", "--output-format", "json", tmp_path / "nope.py").stdout)
    assert missing == [
        {
            "path": str(tmp_path / "nope.py"),
            "cell": None,
            "line": None,
            "code": "error",
            "message": f"{tmp_path / 'nope.py'}: no such file or directory",
        }
    ]


def test_fix_rewrites_in_place_and_exits_0(cli, tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    result = cli("fix", script)
    assert result.exit_code == 0, result.output
    assert script.read_text() == DOUBLE_FIXED
    assert "Fixed 1 finding(s) in 1 file(s) (GF002: 1)" in result.stderr


def test_fix_exits_1_when_findings_stay_unfixed(cli, tmp_path):
    script = write(tmp_path / "train.py", REPORTED)
    result = cli("fix", script)
    assert result.exit_code == 1
    assert "GF003" in result.stdout
    assert script.read_text() == REPORTED


def test_fix_diff_writes_nothing_and_exits_1(cli, tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    result = cli("fix", "--diff", script)
    assert result.exit_code == 1
    assert script.read_text() == DOUBLE
    assert f"--- a/{str(script).lstrip('/')}" in result.stdout
    assert "+    (loss_reg + loss_cls).backward()" in result.stdout
    assert "\x1b[" not in result.stdout  # not a terminal: no colour


def test_fix_diff_without_changes_exits_0(cli, tmp_path):
    result = cli("fix", "--diff", write(tmp_path / "ok.py", CLEAN))
    assert result.exit_code == 0
    assert result.stdout == ""


def test_diff_applies_with_git_apply(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    write(tmp_path / "pkg" / "train.py", DOUBLE)
    diff = subprocess.run([sys.executable, "-m", "gradfix", "fix", "--diff", "pkg"], cwd=tmp_path, capture_output=True, text=True)
    assert diff.returncode == 1, diff.stderr
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply"], cwd=tmp_path, input=diff.stdout, text=True, check=True)
    assert (tmp_path / "pkg" / "train.py").read_text() == DOUBLE_FIXED


def test_diffs_of_absolute_paths_and_names_with_spaces_apply_from_the_project_root(cli, tmp_path, monkeypatch):
    script = write(tmp_path / "my project" / "train step.py", DOUBLE)
    monkeypatch.chdir(tmp_path)
    diff = cli("fix", "--diff", script.resolve()).stdout
    assert "--- a/my project/train step.py\t\n" in diff
    tools = [["git", "apply", "-"], ["patch", "-p1", "--quiet"]]
    for tool in [t for t in tools if shutil.which(t[0])]:
        subprocess.run(tool, cwd=tmp_path, input=diff, text=True, check=True)
        assert script.read_text() == DOUBLE_FIXED
        script.write_text(DOUBLE)


def test_select_and_ignore(cli, tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    assert cli("check", "--select", "GF001,GF003", script).exit_code == 0
    assert cli("check", "--select", "GF00", script).exit_code == 1
    assert cli("check", "--ignore", "GF002,GF010", script).exit_code == 0  # GF010 reports the second backward where GF002 does not


def test_pyproject_configuration(cli, tmp_path):
    script = write(tmp_path / "src" / "train.py", DOUBLE)
    write(tmp_path / "pyproject.toml", '[project]\nname = "demo"\n\n[tool.gradfix]\nignore = ["GF002", "GF010"]\n')
    assert cli("check", script).exit_code == 0
    assert cli("check", "--ignore", "GF001", script).exit_code == 0  # --ignore adds to the file's
    assert cli("check", "--select", "GF002", script).exit_code == 1  # --select replaces the file's choice

    write(tmp_path / "pyproject.toml", "[tool.gradfix]\nunsafe-fixes = true\n")
    assert find_config([script]).unsafe_fixes is True

    write(tmp_path / "pyproject.toml", '[tool.gradfix]\nselct = ["GF001"]\n')
    result = cli("check", script)
    assert result.exit_code == 2 and "unknown key [tool.gradfix] selct" in result.stderr
    write(tmp_path / "pyproject.toml", "[tool.gradfix\n")
    assert cli("check", script).exit_code == 2


def test_each_file_takes_its_nearest_configuration_whatever_the_order_of_paths(cli, tmp_path):
    top = write(tmp_path / "train.py", DOUBLE)
    nested = write(tmp_path / "sub" / "train.py", DOUBLE)
    write(tmp_path / "sub" / "pyproject.toml", '[tool.gradfix]\nignore = ["GF002", "GF010"]\n')
    write(tmp_path / "pyproject.toml", '[project]\nname = "no gradfix table here"\n')
    forward, backward = cli("check", top, nested), cli("check", nested, top)
    assert sorted(forward.stdout.splitlines()) == sorted(backward.stdout.splitlines())
    assert forward.exit_code == backward.exit_code == 1
    assert f"{top}:" in forward.stdout and f"{nested}:" not in forward.stdout
    assert cli("check", tmp_path).stdout == forward.stdout


def test_a_file_calls_the_helpers_of_a_file_checked_with_another_configuration(cli, tmp_path):
    # steps.py takes other rules than train.py (a per-file ignore): its summary still reaches train.py.
    write(tmp_path / "pkg" / "steps.py", "def update(loss, optimizer):\n    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n")
    train = write(
        tmp_path / "pkg" / "train.py",
        "from .steps import update\nimport torch\n\nmodel = torch.nn.Linear(3, 2)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for batch in torch.randn(4, 2, 3):\n    out = model(batch)\n    update(out.mean(), optimizer)\n    update(out.pow(2).mean(), optimizer)\n",
    )
    write(tmp_path / "pyproject.toml", '[tool.gradfix.per-file-ignores]\n"steps.py" = ["GF004"]\n')
    result = cli("check", tmp_path)
    assert result.exit_code == 1 and result.stdout.startswith(f"{train}:8:5: GF002 ")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to check .gitignore handling")
def test_a_folder_git_ignores_is_checked_when_named_and_an_empty_walk_says_so(cli, tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    write(tmp_path / ".gitignore", "generated/\n")
    script = write(tmp_path / "generated" / "train.py", DOUBLE)
    named = cli("check", tmp_path / "generated")
    assert named.exit_code == 1 and f"{script}:" in named.stdout
    walked = cli("check", tmp_path)
    assert walked.exit_code == 0 and f"warning: {tmp_path}: no Python file or notebook to check" in walked.stderr


def test_unknown_rule_code_is_a_usage_error(cli, tmp_path):
    result = cli("check", "--select", "XX9", write(tmp_path / "ok.py", CLEAN))
    assert result.exit_code == 2
    assert "unknown rule" in result.stderr


def test_noqa_suppresses_a_finding(cli, tmp_path):
    text = DOUBLE.replace("    loss_reg.backward()\n", "    loss_reg.backward()  # noqa: GF002\n")
    assert text != DOUBLE
    assert cli("check", write(tmp_path / "train.py", text)).exit_code == 0
    other = DOUBLE.replace("    loss_reg.backward()\n", "    loss_reg.backward()  # noqa: GF001\n")
    assert cli("check", write(tmp_path / "other.py", other)).exit_code == 1


def test_syntax_error_is_reported_and_the_rest_still_checked(cli, tmp_path):
    write(tmp_path / "a_broken.py", "loss.backward(\n")
    write(tmp_path / "b_train.py", DOUBLE)
    result = cli("check", tmp_path)
    assert result.exit_code == 2
    assert f"{tmp_path / 'a_broken.py'}:1: cannot parse: '(' was never closed" in result.stderr
    assert "GF002" in result.stdout
    assert "Traceback" not in result.output


def test_fix_leaves_a_broken_file_alone_and_fixes_the_others(cli, tmp_path):
    broken = write(tmp_path / "a_broken.py", "def f(:\n    loss.backward()\n")
    good = write(tmp_path / "b_train.py", DOUBLE)
    result = cli("fix", tmp_path)
    assert result.exit_code == 2
    assert broken.read_text() == "def f(:\n    loss.backward()\n"
    assert good.read_text() == DOUBLE_FIXED


def test_binary_and_undecodable_files(cli, tmp_path):
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\x00\x01backward\x00")
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"x = '\xe9'  # backward\n")
    result = cli("check", binary, latin)
    assert result.exit_code == 2
    assert f"{binary}: binary file" in result.stderr
    assert f"{latin}: cannot decode" in result.stderr
    assert "Traceback" not in result.output


def test_missing_path(cli, tmp_path):
    result = cli("check", tmp_path / "nope.py")
    assert result.exit_code == 2
    assert "no such file or directory" in result.stderr


def test_unreadable_file(cli, tmp_path, monkeypatch):
    script = write(tmp_path / "train.py", DOUBLE)

    def refuse(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(type(script), "read_bytes", refuse)
    result = cli("check", script)
    assert result.exit_code == 2
    assert f"{script}: cannot read: Permission denied" in result.stderr


def test_an_unreadable_subfolder_is_an_error_and_the_rest_is_checked(cli, tmp_path, monkeypatch):
    write(tmp_path / "train.py", DOUBLE)
    locked = tmp_path / "locked"
    write(locked / "other.py", DOUBLE)
    scan = os.scandir

    def refuse_locked(path="."):
        if os.fspath(path) == str(locked):
            raise PermissionError(13, "Permission denied", str(locked))
        return scan(path)

    monkeypatch.setattr(os, "scandir", refuse_locked)
    result = cli("check", tmp_path)
    assert result.exit_code == 2
    assert f"{locked}: cannot read: Permission denied" in result.stderr
    assert "train.py:" in result.stdout and "other.py" not in result.stdout


def test_a_write_that_fails_is_not_counted_as_fixed(cli, tmp_path, monkeypatch):
    script = write(tmp_path / "train.py", DOUBLE)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("gradfix.codemods.files.write_atomically", full)
    result = cli("fix", script)
    assert result.exit_code == 2
    assert "Fixed 0 finding(s) in 0 file(s)" in result.stderr
    assert f"{script}: cannot write: No space left on device" in result.stderr
    assert f"{script}:" in result.stdout and "GF002" in result.stdout  # the finding is still there
    assert script.read_text() == DOUBLE


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="`type` statements compile from Python 3.12 on")
def test_code_this_python_cannot_compile_is_bad_input_not_an_internal_error(cli, tmp_path):
    newer = write(tmp_path / "train.py", "type Batch = list[int]\n" + DOUBLE)
    result = cli("fix", newer)
    assert result.exit_code == 2
    assert f"{newer}:1: does not compile on Python 3.11: invalid syntax" in result.stderr
    assert "internal error" not in result.output
    assert newer.read_text().endswith(DOUBLE)


def test_encoding_bom_line_endings_and_mode_are_kept(cli, tmp_path):
    text = "# -*- coding: latin-1 -*-\n# caf\xe9\n" + DOUBLE
    script = tmp_path / "train.py"
    script.write_bytes(text.replace("\n", "\r\n").encode("latin-1"))
    script.chmod(0o751)
    assert cli("fix", script).exit_code == 0
    expected = ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + DOUBLE_FIXED).replace("\n", "\r\n").encode("latin-1")
    assert script.read_bytes() == expected
    assert script.stat().st_mode & 0o777 == 0o751

    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbf" + DOUBLE.encode())
    assert cli("fix", bom).exit_code == 0
    assert bom.read_bytes() == b"\xef\xbb\xbf" + DOUBLE_FIXED.encode()


def test_a_file_without_fixes_is_never_written(cli, tmp_path):
    # LibCST does not reproduce trailing whitespace-only lines without a final newline exactly.
    script = tmp_path / "odd.py"
    script.write_bytes(CLEAN.encode() + b"\n   \n  ")
    before = script.stat().st_mtime_ns
    assert cli("fix", script).exit_code == 0
    assert script.read_bytes() == CLEAN.encode() + b"\n   \n  "
    assert script.stat().st_mtime_ns == before


def test_folders_skip_virtualenvs_build_output_and_gitignored_files(cli, tmp_path):
    write(tmp_path / "src" / "train.py", DOUBLE)
    write(tmp_path / ".venv" / "lib" / "train.py", DOUBLE)
    write(tmp_path / "env" / "pyvenv.cfg", "home = /usr\n")
    write(tmp_path / "env" / "lib" / "train.py", DOUBLE)
    write(tmp_path / "build" / "train.py", DOUBLE)
    write(tmp_path / "generated" / "train.py", DOUBLE)
    write(tmp_path / ".gitignore", "generated/\n")
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    result = cli("check", tmp_path)
    paths = {line.split(":")[0] for line in result.stdout.splitlines()}
    expected = {str(tmp_path / "src" / "train.py")}
    if shutil.which("git") is None:
        expected.add(str(tmp_path / "generated" / "train.py"))
    assert paths == expected
    # A file named explicitly is always checked.
    assert cli("check", tmp_path / "build" / "train.py").exit_code == 1


def test_many_files_in_parallel_match_one_process(cli, tmp_path):
    for index in range(12):
        write(tmp_path / f"train_{index:02}.py", DOUBLE if index % 3 else CLEAN)
    serial = cli("check", "--jobs", "1", tmp_path)
    parallel = cli("check", "--jobs", "2", tmp_path)
    assert serial.exit_code == parallel.exit_code == 1
    assert serial.stdout == parallel.stdout
    assert len(serial.stdout.splitlines()) == 8


def test_rules_and_explain(cli):
    listing = cli("rules")
    assert listing.exit_code == 0
    for code in ("GF001", "GF002", "GF003", "GF004"):
        assert code in listing.stdout
    explained = cli("explain", "GF002")
    assert explained.exit_code == 0
    assert "(loss_reg + loss_cls).backward()" in explained.stdout
    assert "Trying to backward through the graph a second time" in explained.stdout
    assert cli("explain", "GF999").exit_code == 2


def test_version(cli):
    from gradfix import __version__

    result = cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"gradfix {__version__}"


def test_python_dash_m_and_no_arguments():
    result = subprocess.run([sys.executable, "-m", "gradfix"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "Usage" in result.stdout + result.stderr


def test_summaries_cross_the_files_of_one_run(cli, tmp_path):
    """A helper in one file backwards the loss it returns, a criterion in it backwards its own
    loss; the training script in another file backwards both again."""
    write(
        tmp_path / "pkg" / "steps.py",
        "import torch\n\n\ndef train_step(model, batch):\n    loss = model(batch).pow(2).mean()\n"
        "    loss.backward()\n    return loss\n\n\nclass Criterion:\n    def __call__(self, output, target):\n"
        "        loss = torch.nn.functional.mse_loss(output, target)\n        loss.backward()\n        return loss\n",
    )
    script = write(
        tmp_path / "pkg" / "train.py",
        "import torch\n\nfrom .steps import Criterion, train_step\n\nmodel = torch.nn.Linear(3, 1)\n"
        "criterion = Criterion()\nfor batch in torch.randn(4, 2, 3):\n    loss = train_step(model, batch)\n"
        "    loss.backward()\n    loss = criterion(model(batch), torch.zeros(2, 1))\n    loss.backward()\n",
    )
    result = cli("check", tmp_path)
    assert result.exit_code == 1
    assert "train.py:9:5: GF001 `loss` is backwarded again (first inside `train_step`, called at line 8)" in result.stdout
    assert "train.py:11:5: GF001" in result.stdout
    assert cli("fix", tmp_path).exit_code == 0
    assert "loss.backward()" not in script.read_text()
    assert cli("check", script).exit_code == 0  # alone, the file's imports resolve to nothing checked


def test_a_helper_of_another_file_whose_loss_saved_nothing_certain_gets_no_safe_removal(cli, tmp_path):
    """The variant that hides the fact: the helper's loss is a sum of what it is given, which saves
    no tensor, so the second backward may run (a graph of sums does) and its removal is unsafe."""
    write(tmp_path / "pkg" / "steps.py", "def train_step(model, batch):\n    loss = model(batch).sum()\n    loss.backward()\n    return loss\n")
    script = write(
        tmp_path / "pkg" / "train.py",
        "import torch\n\nfrom .steps import train_step\n\nmodel = torch.nn.Linear(3, 1)\n"
        "for batch in torch.randn(4, 2, 3):\n    loss = train_step(model, batch)\n    loss.backward()\n",
    )
    result = cli("check", tmp_path)
    assert result.exit_code == 1 and "train.py:8:5: GF001" in result.stdout and "[unsafe fix]" in result.stdout
    assert cli("fix", tmp_path).exit_code == 1
    assert "    loss.backward()" in script.read_text()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to check .gitignore handling")
def test_a_symlink_to_outside_the_repository_keeps_gitignore_honoured(cli, tmp_path):
    repository, outside = tmp_path / "repo", tmp_path / "elsewhere"
    write(repository / "src" / "train.py", DOUBLE)
    write(repository / "generated" / "train.py", DOUBLE)
    write(repository / ".gitignore", "generated/\n")
    write(outside / "helper.py", CLEAN)
    (repository / "src" / "helper.py").symlink_to(outside / "helper.py")
    subprocess.run(["git", "init", "-q"], cwd=repository, check=True)
    result = cli("check", repository)
    assert {line.split(":")[0] for line in result.stdout.splitlines()} == {str(repository / "src" / "train.py")}


def test_fifos_and_symlink_loops_are_one_clear_line_and_exit_2(cli, tmp_path):
    write(tmp_path / "train.py", DOUBLE)
    os.mkfifo(tmp_path / "pipe.py")
    (tmp_path / "loop_a.py").symlink_to(tmp_path / "loop_b.py")
    (tmp_path / "loop_b.py").symlink_to(tmp_path / "loop_a.py")
    for path, problem in ((tmp_path / "pipe.py", "not a regular file"), (tmp_path / "loop_a.py", "symlink loop")):
        result = cli("check", path)
        assert result.exit_code == 2 and f"{path}: {problem}" in result.stderr
        assert "Traceback" not in result.output
    walked = cli("check", tmp_path)  # a walk skips the FIFO, names each loop, checks the rest
    assert walked.exit_code == 2
    assert str(tmp_path / "train.py") in walked.stdout
    assert "pipe.py" not in walked.output and "loop_b.py: symlink loop" in walked.stderr


def test_noqa_in_upper_case_suppresses_too(cli, tmp_path):
    script = write(tmp_path / "train.py", DOUBLE.replace("    loss_reg.backward()\n", "    loss_reg.backward()  # NOQA: GF002\n"))
    assert cli("check", script).exit_code == 0


def test_check_counts_unsafe_fixes_apart_from_safe_ones(cli, tmp_path):
    after_loop = (FIXTURES / "gf008_backward_after_loop" / "accel_backward_after_batch_loop" / "before.py").read_text()
    script = write(tmp_path / "train.py", after_loop)
    result = cli("check", script)
    assert result.exit_code == 1
    assert "0 can be fixed with `gradfix fix`, 1 more with `gradfix fix --unsafe-fixes`." in result.stderr


def test_help_short_option_empty_select_and_unknown_codes(cli, tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    assert cli("-h").exit_code == 0 and cli("check", "-h").exit_code == 0
    empty = cli("check", "--select", "", script)
    assert empty.exit_code == 2 and "--select names no rule" in empty.stderr
    unknown = cli("check", "--select", "GF999", script)
    assert unknown.exit_code == 2 and "GF001, GF002" in unknown.stderr


def test_piped_output_keeps_the_fix_marker(cli, tmp_path):
    result = cli("check", write(tmp_path / "train.py", DOUBLE))
    assert result.exit_code == 1
    assert result.stdout.rstrip("\n").endswith("[safe fix]")  # CliRunner's stdout is not a terminal


def test_tables_piped_are_not_wrapped(cli):
    listed = cli("rules").stdout.splitlines()
    assert any(line.startswith("GF002") and line.rstrip().endswith("losses that share a graph are backwarded separately") for line in listed)
    assert len(listed) == 1 + len(all_rules())


def test_stdin_is_checked_and_fixed_with_its_given_name_and_settings(tmp_path, monkeypatch):
    runner = CliRunner()
    write(tmp_path / "sub" / "pyproject.toml", '[tool.gradfix]\nignore = ["GF002", "GF010"]\n')
    monkeypatch.chdir(tmp_path)
    checked = runner.invoke(app, ["check", "-", "--stdin-filename", "train.py"], input=DOUBLE)
    assert checked.exit_code == 1 and checked.stdout.startswith("train.py:19:5: GF002")
    quiet = runner.invoke(app, ["check", "-", "--stdin-filename", "sub/train.py"], input=DOUBLE)
    assert quiet.exit_code == 0 and quiet.stdout == ""  # sub/'s settings ignore GF002
    fixed = runner.invoke(app, ["fix", "-"], input=DOUBLE)
    assert fixed.exit_code == 0 and fixed.stdout == DOUBLE_FIXED
    left = runner.invoke(app, ["fix", "-", "--stdin-filename", "loop.py"], input=REPORTED)
    assert left.exit_code == 1 and left.stdout == REPORTED  # nothing to fix: the code comes back as it was
    assert "loop.py:" in left.stderr
    diffed = runner.invoke(app, ["fix", "--diff", "-", "--stdin-filename", "train.py"], input=DOUBLE)
    assert diffed.exit_code == 1 and diffed.stdout.startswith("--- a/train.py\n+++ b/train.py\n")
    mixed = runner.invoke(app, ["check", "-", "train.py"], input=DOUBLE)
    assert mixed.exit_code == 2 and "cannot be given with other paths" in mixed.stderr


def test_statistics_concise_and_exit_zero(cli, tmp_path):
    first = write(tmp_path / "a.py", DOUBLE)
    write(tmp_path / "b.py", DOUBLE)
    counted = cli("check", "--statistics", tmp_path)
    assert counted.exit_code == 1
    assert counted.stdout.split() == ["count", "code", "name", "fixable", "2", "GF002", "separate_backwards", "2"]
    concise = cli("check", "--output-format", "concise", first)
    assert concise.exit_code == 1 and concise.stdout.startswith(f"{first}:19:5: GF002") and concise.stderr == ""
    assert cli("check", "--exit-zero", first).exit_code == 0
    assert cli("check", "--exit-zero", write(tmp_path / "broken.py", "loss.backward(\n")).exit_code == 2


def test_show_fixes_and_exit_non_zero_on_fix(cli, tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    shown = cli("fix", "--show-fixes", "--exit-non-zero-on-fix", script)
    assert shown.exit_code == 1 and script.read_text() == DOUBLE_FIXED
    assert f"fixed {script}:19:5: GF002" in shown.stderr
    assert cli("fix", "--exit-non-zero-on-fix", script).exit_code == 0  # nothing changed this time


def test_interactive_fix_writes_only_what_is_accepted(tmp_path, monkeypatch):
    monkeypatch.setattr(check_commands, "_stdin_is_terminal", lambda: True)
    runner = CliRunner()
    first = write(tmp_path / "a.py", DOUBLE)
    second = write(tmp_path / "b.py", DOUBLE)
    third = write(tmp_path / "c.py", DOUBLE)
    reviewed = runner.invoke(app, ["fix", "--interactive", str(first), str(second), str(third)], input="n\ny\nq\n")
    assert reviewed.exit_code == 1, reviewed.output  # a.py and c.py still have their finding
    assert first.read_text() == DOUBLE and second.read_text() == DOUBLE_FIXED and third.read_text() == DOUBLE
    assert reviewed.stdout.count("+++ b/") == 3  # each fix shown before its question
    assert "Fixed 1 finding(s) in 1 file(s)" in reviewed.stderr
    everything = runner.invoke(app, ["fix", "-i", str(first), str(third)], input="a\n")
    assert everything.exit_code == 0 and first.read_text() == third.read_text() == DOUBLE_FIXED
    assert runner.invoke(app, ["fix", "-i", "--diff", str(first)]).exit_code == 2


# issue 28 ---------------------------------------------------------------------------------------
def codes(result):
    """The rule codes of the findings a run printed."""
    return {line.split(": ", 2)[1].split()[0] for line in result.stdout.splitlines() if ": GF" in line}


def run_main(monkeypatch, *args):
    """``gradfix`` as its entry point runs it (the errors it did not foresee are caught there):
    the exit status."""
    monkeypatch.setattr(sys, "argv", ["gradfix", *map(str, args)])
    with pytest.raises(SystemExit) as exit_:
        main()
    return exit_.value.code


@pytest.mark.parametrize("command", [["check"], ["fix", "--diff"], ["rules"]], ids=["check", "fix", "rules"])
def test_an_error_gradfix_did_not_foresee_exits_2_with_one_line_and_its_traceback_under_verbose(monkeypatch, capsys, tmp_path, command):
    write(tmp_path / "train.py", DOUBLE)

    def broken(*args, **kwargs):
        raise RuntimeError("the disk said no")

    monkeypatch.setattr("gradfix.codemods.run.collect_files", broken)
    monkeypatch.setattr(render, "rules_table", broken)
    paths = [tmp_path] if command != ["rules"] else []
    assert run_main(monkeypatch, *command, *paths) == 2
    assert capsys.readouterr().err == "error: internal error: RuntimeError: the disk said no (--verbose shows where)\n"
    assert run_main(monkeypatch, *command, "--verbose", *paths) == 2
    shown = capsys.readouterr().err
    assert shown.startswith("Traceback (most recent call last):\n") and 'raise RuntimeError("the disk said no")' in shown
    assert shown.endswith("RuntimeError: the disk said no\nerror: internal error: RuntimeError: the disk said no\n")


def test_a_step_summary_that_cannot_be_written_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    clean = write(tmp_path / "ok.py", CLEAN)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))  # a folder
    assert run_main(monkeypatch, "check", "--output-format", "github", clean) == 2
    assert capsys.readouterr().err == f"error: $GITHUB_STEP_SUMMARY names {tmp_path}, which cannot be appended to: Is a directory\n"


def test_statistics_as_json_and_json_lines(cli, tmp_path):
    write(tmp_path / "a.py", DOUBLE)
    write(tmp_path / "b.py", DOUBLE)
    counted = cli("check", "--statistics", "--output-format", "json", tmp_path)
    assert counted.exit_code == 1
    assert json.loads(counted.stdout) == [{"count": 2, "code": "GF002", "name": "separate_backwards", "fixable": 2}]
    lines = cli("check", "--statistics", "--output-format", "json-lines", tmp_path).stdout.splitlines()
    assert [json.loads(line) for line in lines] == [{"count": 2, "code": "GF002", "name": "separate_backwards", "fixable": 2}]
    refused = cli("check", "--statistics", "--output-format", "sarif", tmp_path)
    assert refused.exit_code == 2 and refused.stderr == "error: --statistics counts findings as text or JSON, not as sarif\n"


def test_rules_are_selected_by_name_too(cli, tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    assert cli("check", "--select", "duplicate_backward", script).exit_code == 0
    assert codes(cli("check", "--select", "separate_backwards", script)) == {"GF002"}
    assert cli("check", "--ignore", "separate_backwards", "--select", "GF002,GF003", script).exit_code == 0
    write(tmp_path / "pyproject.toml", '[tool.gradfix]\nselect = ["forward_outside_loop"]\n')
    assert cli("check", script).exit_code == 0


@pytest.mark.parametrize(
    "comment, silenced",
    [
        ("  # noqa: duplicate_backward", False),  # another rule, by name
        ("  # noqa: separate_backwards", True),
        ("  # noqa: see #12", False),  # no rule named: silences nothing
        ("  # noqa: GF002 merged on purpose", True),
        ("  # noqa", True),
    ],
)
def test_a_noqa_silences_what_it_names(cli, tmp_path, comment, silenced):
    script = write(tmp_path / "train.py", DOUBLE.replace("    loss_reg.backward()\n", f"    loss_reg.backward(){comment}\n"))
    assert ("GF002" in codes(cli("check", script))) is not silenced


def test_noqa_inside_a_string_is_no_comment(cli, tmp_path):
    keyed = (FIXTURES / "gf002_separate_backwards" / "while_loop_method" / "before.py").read_text()
    assert '            losses["recon"].backward()\n' in keyed
    script = write(tmp_path / "train.py", keyed.replace('"recon"', '"# noqa"'))  # losses["# noqa"].backward()
    assert "GF002" in codes(cli("check", script))


@pytest.mark.parametrize(
    "header, silenced",
    [("# gradfix: noqa\n", True), ("# gradfix: noqa: GF002\n", True), ("# gradfix: noqa: GF001\n", False), ("x = 1  # gradfix: noqa\n", False)],
)
def test_a_file_level_noqa_silences_the_whole_file(cli, tmp_path, header, silenced):
    script = write(tmp_path / "train.py", header + DOUBLE)
    assert ("GF002" in codes(cli("check", script))) is not silenced


def test_fix_exit_zero_exits_0_with_findings_left_but_not_with_errors(cli, tmp_path):
    left = write(tmp_path / "left.py", REPORTED)
    assert cli("fix", "--exit-zero", left).exit_code == 0
    assert cli("fix", "--diff", "--exit-zero", write(tmp_path / "train.py", DOUBLE)).exit_code == 0
    assert cli("fix", "--exit-zero", write(tmp_path / "broken.py", "loss.backward(\n")).exit_code == 2


def test_config_file_and_settings_on_the_command_line(cli, tmp_path):
    script = write(tmp_path / "src" / "train.py", DOUBLE)
    write(tmp_path / "src" / "pyproject.toml", '[tool.gradfix]\nignore = ["GF002"]\n')
    assert "GF002" not in codes(cli("check", script))
    shared = write(tmp_path / "ci" / "gradfix.toml", 'select = ["GF00"]\n')  # another TOML file: its top level
    assert "GF002" in codes(cli("check", "--config", shared, script))  # the file named replaces the one found
    assert "GF002" in codes(cli("check", "--config", "ignore = []", script))  # a setting over the one found
    assert cli("check", "--config", "select = ['GF001']", "--config", shared, script).exit_code == 0
    project = write(tmp_path / "other" / "pyproject.toml", '[tool.gradfix]\nignore = ["separate_backwards"]\n')
    assert "GF002" not in codes(cli("check", "--config", project, script))
    unknown = cli("check", "--config", "selct = ['GF001']", script)
    assert unknown.exit_code == 2 and "--config: unknown key selct" in unknown.stderr
    neither = cli("check", "--config", "missing.toml", script)
    assert neither.exit_code == 2 and "--config 'missing.toml' is neither a file nor a setting" in neither.stderr


def test_extend_select_adds_to_the_configured_selection(cli, tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    write(tmp_path / "pyproject.toml", '[tool.gradfix]\nselect = ["GF001"]\n')
    assert cli("check", script).exit_code == 0
    assert codes(cli("check", "--extend-select", "GF002", script)) == {"GF002"}
    write(tmp_path / "pyproject.toml", '[tool.gradfix]\nselect = ["GF001"]\nextend-select = ["separate_backwards"]\n')
    assert codes(cli("check", script)) == {"GF002"}
    write(tmp_path / "pyproject.toml", '[tool.gradfix]\nignore = ["GF002"]\n')
    assert "GF002" in codes(cli("check", "--extend-select", "GF002", script))  # the command line wins


def test_per_file_ignores(cli, tmp_path):
    write(tmp_path / "tests" / "test_train.py", DOUBLE)
    kept = write(tmp_path / "src" / "train.py", DOUBLE)
    write(tmp_path / "legacy_train.py", DOUBLE)
    write(tmp_path / "scripts" / "old" / "train.py", DOUBLE)
    write(tmp_path / "pyproject.toml", '[tool.gradfix.per-file-ignores]\n"tests/*" = ["GF002"]\n"legacy_*.py" = ["GF00"]\n"old" = ["GF002"]\n')
    result = cli("check", "--select", "GF00", tmp_path)
    assert result.exit_code == 1
    assert {line.split(":")[0] for line in result.stdout.splitlines()} == {str(kept)}
    assert cli("check", "--select", "GF002", tmp_path / "tests").exit_code == 0  # applied whatever the selection
    write(tmp_path / "pyproject.toml", '[tool.gradfix.per-file-ignores]\n"tests/*" = ["GF999"]\n')
    bad = cli("check", tmp_path)
    assert bad.exit_code == 2 and "per-file-ignores: unknown rule code, prefix or name: GF999" in bad.stderr


def test_exclude_and_extend_exclude_and_force_exclude(cli, tmp_path):
    write(tmp_path / "src" / "train.py", DOUBLE)
    generated = write(tmp_path / "generated" / "train.py", DOUBLE)
    write(tmp_path / "experiments" / "old_train.py", DOUBLE)
    write(tmp_path / "build" / "train.py", DOUBLE)
    write(tmp_path / "pyproject.toml", '[tool.gradfix]\nextend-exclude = ["generated", "experiments/old_*.py"]\n')

    def checked(*args):
        return {line.split(":")[0] for line in cli("check", *args).stdout.splitlines()}

    assert checked(tmp_path) == {str(tmp_path / "src" / "train.py")}
    assert checked(generated) == {str(generated)}  # named on the command line
    assert checked("--force-exclude", generated, tmp_path / "src") == {str(tmp_path / "src" / "train.py")}
    assert checked("--extend-exclude", "src", tmp_path) == set()
    # --exclude replaces the configured `exclude` (the defaults here: build), not its `extend-exclude`
    assert checked("--exclude", "src", tmp_path) == {str(tmp_path / "build" / "train.py")}
    write(tmp_path / "pyproject.toml", '[tool.gradfix]\nexclude = ["src"]\n')  # replaces the defaults: build is checked
    assert checked(tmp_path) == {str(tmp_path / p / "train.py") for p in ("generated", "build")} | {str(tmp_path / "experiments" / "old_train.py")}


def test_force_exclude_applies_to_a_folder_above_a_named_file(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "build" / "train.py", DOUBLE)
    result = cli("check", "--force-exclude", "build/train.py")  # as pre-commit names a staged file
    assert result.exit_code == 0 and result.stdout == ""


def test_watch_checks_again_when_a_file_changes(cli, tmp_path, monkeypatch):
    script = write(tmp_path / "train.py", CLEAN)
    looks = []

    class Stop(Exception):
        pass

    real_sleep = check_commands.time.sleep

    def sleep(seconds):
        if seconds != check_commands.WATCH_INTERVAL:  # another's (a subprocess waiting)
            return real_sleep(seconds)
        looks.append(seconds)
        if len(looks) == 1:
            script.write_text(DOUBLE + "\n")  # another size: a change whatever the clock
        elif len(looks) == 3:
            raise Stop

    monkeypatch.setattr(check_commands.time, "sleep", sleep)
    result = cli("check", "--watch", tmp_path)
    assert isinstance(result.exception, Stop)
    assert result.stdout.count(f"{script}:19:5: GF002") == 1  # checked twice: clean, then the change; not a third time
    assert result.stderr.count("Watching for file changes") == 2
    assert "No findings in 1 file(s)." in result.stderr


def test_check_unsafe_fixes_shows_what_an_unsafe_fix_would_do(cli, tmp_path):
    after_loop = FIXTURES / "gf008_backward_after_loop" / "module_level_epoch_batch_loop"
    script = write(tmp_path / "train.py", (after_loop / "before.py").read_text())
    plain = cli("check", script)
    assert plain.exit_code == 1 and "+++ b/" not in plain.stdout
    shown = cli("check", "--unsafe-fixes", script)
    assert shown.exit_code == 1 and script.read_text() == (after_loop / "before.py").read_text()
    diff = shown.stdout[shown.stdout.index("--- a/") :]
    patched = tmp_path / "patched"
    write(patched / "train.py", (after_loop / "before.py").read_text())
    subprocess.run(
        ["patch", "-p1", "--quiet", "-d", str(patched), "-i", "-"], input=diff.replace(str(script).lstrip("/"), "train.py"), text=True, check=True
    )
    assert (patched / "train.py").read_text() == (after_loop / "after.py").read_text()
    write(tmp_path / "pyproject.toml", "[tool.gradfix]\nunsafe-fixes = true\n")
    assert "+++ b/" in cli("check", script).stdout and "+++ b/" not in cli("check", "--no-unsafe-fixes", script).stdout


def test_rules_as_json(cli):
    listed = cli("rules", "--output-format", "json")
    assert listed.exit_code == 0
    records = json.loads(listed.stdout)
    assert [r["code"] for r in records] == [rule.CODE for rule in all_rules()]
    first = records[0]
    assert (first["name"], first["fix"]) == ("duplicate_backward", "safe")
    assert first["summary"] and first["explanation"] and first["example_before"] and first["example_after"]


def test_an_unusable_cache_dir_is_said_once(tmp_path, monkeypatch):
    monkeypatch.delenv("GRADFIX_NO_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    write(tmp_path / "a.py", DOUBLE)
    write(tmp_path / "b.py", CLEAN)
    taken = write(tmp_path / "taken", "a file where the cache folder would be\n")
    result = CliRunner().invoke(app, ["check", "--cache-dir", str(taken), str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr.count("warning:") == 1
    assert f"warning: --cache-dir {taken}: cannot be made: File exists; checking without the cache\n" in result.stderr
    usable = CliRunner().invoke(app, ["check", "--cache-dir", str(tmp_path / "cache"), str(tmp_path)])
    assert usable.exit_code == 1 and "warning" not in usable.stderr


def test_help_names_arguments_and_values_as_users_read_them(cli):
    for command in ("check", "fix", "pr", "rules", "explain", "verify", "diagnose"):
        shown = cli(command, "--help").stdout
        assert "{" not in shown.splitlines()[0], shown
        assert not re.search(r"<(list\[\w+\]|str|int|float|path|\w+ range|[\w-]+(\|[\w-]+)+)>", shown), shown
    assert cli("check", "--help").stdout.startswith("Usage: root check [OPTIONS] [PATH...]\n")  # (CliRunner names the program root)


def test_piped_tables_have_no_trailing_spaces(cli):
    lines = cli("rules").stdout.splitlines()
    assert lines and all(line == line.rstrip() for line in lines)


def test_a_missing_path_is_its_error_alone(cli, tmp_path):
    result = cli("check", tmp_path / "nope.py")
    assert result.exit_code == 2
    assert result.stderr == f"error: {tmp_path / 'nope.py'}: no such file or directory\n"
    unchecked = cli("check", write(tmp_path / "broken.py", "loss.backward(\n"), write(tmp_path / "ok.py", CLEAN))
    assert unchecked.stderr.endswith("No findings in 1 file(s); 1 could not be checked.\n")


def test_interactive_fix_without_a_terminal_refuses_at_once(cli, tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    result = CliRunner().invoke(app, ["fix", "-i", str(script)], input="y\n")
    assert result.exit_code == 2
    assert result.stderr == "error: --interactive asks before each fix: it needs a terminal on stdin\n"
    assert result.stdout == "" and script.read_text() == DOUBLE


def test_verify_skips_a_case_whose_framework_is_not_installed(warm_cli, tmp_path, monkeypatch):
    case = tmp_path / "gf001_duplicate_backward" / "ok_deepspeed_cifar_fresh_forward_per_batch"
    shutil.copytree(FIXTURES / case.parent.name / case.name, case)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "deepspeed" else real_find_spec(name, *rest))
    result = warm_cli("verify", tmp_path)
    assert result.exit_code == 0, result.output
    assert result.stderr == "0 passed, 0 failed, 1 skipped (1 fixture case(s))\n"
    assert result.stdout.splitlines()[1].split(None, 3) == [
        "gf001_duplicate_backward/ok_deepspeed_cifar_fresh_forward_per_batch",
        "all",
        "skip",
        "needs deepspeed, which is not installed",
    ]
