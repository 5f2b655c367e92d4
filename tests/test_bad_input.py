"""Bad input is one clear error for the file it is in: the other files are still checked and fixed,
and nothing that cannot be read ever reads as clean."""

import json
import os
import stat
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import gradfix
from gradfix.cli.app import app
from gradfix.codemods.execution import diagnose
from gradfix.codemods.execution.verify import BadFixture, discover

from .conftest import FIXTURES

PAIR = FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop"
BEFORE, AFTER = (PAIR / "before.py").read_bytes(), (PAIR / "after.py").read_bytes()


def cli(*args) -> "subprocess.CompletedProcess[str]":
    return CliRunner().invoke(app, [str(a) for a in args])


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error: ")]


def code_cell(source) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}


def notebook(cells: list, metadata: dict | None = None) -> str:
    return json.dumps({"cells": cells, "metadata": metadata or {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (notebook([code_cell("loss.backward()\n")], {"language_info": 7}), "metadata.language_info is not an object"),
        (notebook([7, code_cell("loss.backward()\n")]), "cell 1 is not an object"),
        (notebook([code_cell(["loss.backward()\n", 7])]), "the source of cell 1 is not text"),
        ('{"cells": {"backward": 1}}', "`cells` is not a list"),
    ],
    ids=["language_info", "cell", "source_line", "cells"],
)
def test_a_malformed_notebook_is_one_error_and_the_other_files_are_fixed(tmp_path, text, why):
    (tmp_path / "bad.ipynb").write_text(text)
    (tmp_path / "train.py").write_bytes(BEFORE)
    result = cli("fix", tmp_path)
    assert result.exit_code == 2, result.output
    assert error_lines(result) == [f"error: {tmp_path / 'bad.ipynb'}: not a Jupyter notebook ({why})"]
    assert (tmp_path / "train.py").read_bytes() == AFTER
    assert (tmp_path / "bad.ipynb").read_text() == text


@pytest.mark.parametrize(
    "text",
    ["{not json", '{"cells": 3}', notebook([code_cell("print(1)\n")], {"language_info": {"name": 7}})],
    ids=["json", "cells", "language_name"],
)
def test_an_invalid_notebook_that_never_backwards_is_still_an_error(tmp_path, text):
    (tmp_path / "bad.ipynb").write_text(text)
    result = cli("check", tmp_path / "bad.ipynb")
    assert result.exit_code == 2, result.output
    assert len(error_lines(result)) == 1 and "bad.ipynb: not a Jupyter notebook" in result.stderr


def test_a_file_that_does_not_parse_is_an_error_even_when_it_never_backwards(tmp_path):
    (tmp_path / "s.py").write_bytes(b"def f(:\n")
    (tmp_path / "cells.ipynb").write_text(notebook([code_cell("import torch\n"), code_cell("for x in y\n")]))
    result = cli("check", tmp_path)
    assert result.exit_code == 2, result.output
    assert error_lines(result) == [
        f"error: {tmp_path / 'cells.ipynb'}:cell 2:1: cannot parse: expected ':'",
        f"error: {tmp_path / 's.py'}:1: cannot parse: invalid syntax",
    ]
    assert gradfix.check("def f(:\n", path="s.py").errors == ("s.py:1: cannot parse: invalid syntax",)


def test_a_notebook_that_spells_its_backward_with_a_json_escape_is_checked(tmp_path):
    text = notebook([code_cell((PAIR / "before.py").read_text())]).replace("backward", "\\u0062ackward")
    assert "backward" not in text
    (tmp_path / "train.ipynb").write_text(text)
    result = cli("check", tmp_path)
    assert result.exit_code == 1 and ":cell 1:19:5: GF002 " in result.stdout


def test_syntax_newer_than_this_python_is_not_an_error_where_nothing_backwards(tmp_path):
    (tmp_path / "generic.py").write_bytes(b"def first[T](items: list[T]) -> T:\n    return items[0]\n")
    result = cli("check", tmp_path / "generic.py")
    assert result.exit_code == 0, result.output
    assert not gradfix.check("type Pair = tuple[int, int]\n").errors


def test_deeply_nested_code_is_an_error_for_its_file_not_a_crash_of_the_run(tmp_path):
    # LibCST's native parser overflows the C stack on these (SIGSEGV); Python's own parser gives up
    # on the first (RecursionError) and the third (MemoryError) and reads the second flat.
    (tmp_path / "sum.py").write_text("import torch\nx = " + "+".join(["1"] * 12_000) + "\nx.backward()\n")
    (tmp_path / "both.py").write_text("import torch\nx = " + " and ".join(["a"] * 12_000) + "\nx.backward()\n")
    (tmp_path / "elif.py").write_text("import torch\nif a:\n    pass\n" + "elif a: pass\n" * 5_000 + "x.backward()\n")
    (tmp_path / "train.py").write_bytes(BEFORE)
    result = subprocess.run(
        [sys.executable, "-m", "gradfix", "fix", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "GRADFIX_NO_CACHE": "1"},
    )
    assert result.returncode == 2, result.stderr
    errors = sorted(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert len(errors) == 3, result.stderr
    for name, error in zip(["both.py", "elif.py", "sum.py"], errors):
        assert error.startswith(f"error: {tmp_path / name}:") and "too deeply nested" in error
    assert (tmp_path / "train.py").read_bytes() == AFTER


def test_verify_refuses_fixture_scripts_that_are_not_regular_files(tmp_path):
    case = tmp_path / "separate_backwards" / "fifo"
    case.mkdir(parents=True)
    os.mkfifo(case / "before.py")
    (case / "after.py").write_bytes(AFTER)
    result = subprocess.run([sys.executable, "-m", "gradfix", "verify", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"error: {case / 'before.py'}: not a regular file" in result.stderr


@pytest.mark.parametrize("name", ["ok.py", "helper.py"])
def test_a_fixture_script_linked_to_a_device_is_refused_before_it_is_read(tmp_path, name):
    case = tmp_path / "separate_backwards" / "zero"
    case.mkdir(parents=True)
    (case / "ok.py").write_bytes(AFTER)
    (case / name).unlink(missing_ok=True)
    (case / name).symlink_to("/dev/zero")
    with pytest.raises(BadFixture, match=f"{name}: not a regular file"):
        discover([tmp_path])


@pytest.mark.parametrize(
    ("toml", "table"), [("[tool]\ngradfix = 3\n", "tool.gradfix"), ("[tool]\ngradfix = [1]\n", "tool.gradfix"), ("tool = 3\n", "tool")]
)
def test_a_configuration_that_is_not_a_table_is_a_clear_error(tmp_path, toml, table):
    (tmp_path / "pyproject.toml").write_text(toml)
    (tmp_path / "train.py").write_bytes(BEFORE)
    result = cli("check", tmp_path)
    assert result.exit_code == 2, result.output
    assert error_lines(result) == [f"error: {tmp_path / 'pyproject.toml'}: [{table}] must be a table"]


def test_diagnose_refuses_a_script_edited_during_its_run(warm_cli, runs, monkeypatch, tmp_path):
    script = tmp_path / "train.py"
    script.write_bytes(BEFORE)
    edited = BEFORE + b"# edited while gradfix ran it\n"
    run = runs.runner.run

    def run_then_edit(*args, **kwargs):
        result = run(*args, **kwargs)
        script.write_bytes(edited)
        return result

    monkeypatch.setattr(runs.runner, "run", run_then_edit)
    result = warm_cli("diagnose", "--fix", script)
    assert result.exit_code == 2, result.output
    assert f"error: {script}: changed while gradfix ran it; run diagnose again" in result.stderr
    assert script.read_bytes() == edited


def test_diagnose_fix_does_not_write_over_a_script_edited_before_the_write(warm_cli, monkeypatch, tmp_path):
    script = tmp_path / "train.py"
    script.write_bytes(BEFORE)
    edited = BEFORE + b"# edited while gradfix explained the run\n"
    explain = diagnose._explain

    def explain_then_edit(*args, **kwargs):  # (after the run, whose script is checked unchanged)
        explain(*args, **kwargs)
        script.write_bytes(edited)

    monkeypatch.setattr(diagnose, "_explain", explain_then_edit)
    result = warm_cli("diagnose", "--fix", script)
    assert result.exit_code == 2, result.output
    assert f"error: {script}: changed since gradfix read it; not written" in result.stderr
    assert script.read_bytes() == edited


def test_a_file_and_a_link_to_it_in_one_tree_are_fixed_once(tmp_path):
    (tmp_path / "train.py").write_bytes(BEFORE)
    (tmp_path / "alias.py").symlink_to("train.py")
    os.link(tmp_path / "train.py", tmp_path / "hard.py")
    checked = cli("check", tmp_path)
    assert [line.split(":")[0] for line in checked.stdout.splitlines()] == [str(tmp_path / "hard.py")]
    result = cli("fix", tmp_path)
    assert result.exit_code == 0, result.output
    assert "Fixed 1 finding(s) in 1 file(s)" in result.stderr
    assert (tmp_path / "train.py").read_bytes() == AFTER == (tmp_path / "hard.py").read_bytes()
    assert (tmp_path / "alias.py").is_symlink()


def test_a_fix_keeps_setuid_and_setgid_bits(tmp_path):
    script = tmp_path / "train.py"
    script.write_bytes(BEFORE)
    script.chmod(0o6750)
    assert cli("fix", script).exit_code == 0
    assert script.read_bytes() == AFTER and stat.S_IMODE(script.stat().st_mode) == 0o6750


def test_a_fix_keeps_extended_attributes(tmp_path):
    script = tmp_path / "train.py"
    script.write_bytes(BEFORE)
    try:
        os.setxattr(script, "user.origin", b"notebook export")
    except OSError as error:
        pytest.skip(f"{tmp_path}'s filesystem keeps no user extended attributes ({error.strerror})")
    assert cli("fix", script).exit_code == 0
    assert script.read_bytes() == AFTER and os.getxattr(script, "user.origin") == b"notebook export"


def test_a_file_with_carriage_returns_only_keeps_its_final_one():
    result = gradfix.fix(BEFORE.replace(b"\n", b"\r"), path="train.py")
    assert result.source == AFTER.replace(b"\n", b"\r")


def test_a_fix_keeps_the_lines_libcst_does_not_give_back():
    # LibCST's code of a file ending in a blank line and a line of spaces drops the blank line
    # (NIID-Bench's experiments.py): the lines no fix changed stay the file's own.
    ending = b'print("done")\n\n    \n'
    result = gradfix.fix(BEFORE + ending, path="train.py")
    assert result.source == AFTER + ending
    assert [f.code for f in result.fixed] == ["GF002"]


def test_a_fix_that_meets_lines_libcst_does_not_give_back_is_not_made(monkeypatch):
    from gradfix.codemods import check

    assert check._untouched_lines_kept(b"a\n\n  \n", b"a\n  \n", b"b\n  \n") == b"b\n\n  \n"
    assert check._untouched_lines_kept(b"a\n\n  \n", b"a\n  \n", b"a\nc\n  \n") is None  # (the blank line before `c`, or after?)
    monkeypatch.setattr(check, "_untouched_lines_kept", lambda original, parsed, rewritten: None)
    result = gradfix.fix(BEFORE + b'print("done")\n\n    \n', path="train.py")
    assert result.source == BEFORE + b'print("done")\n\n    \n' and not result.fixed
    assert [f.code for f in result.findings] == ["GF002"]
    assert any("LibCST does not give back the file's own text" in error for error in result.errors)


def test_a_file_python_reads_but_libcst_does_not_names_the_line_that_mixes_tabs_and_spaces(tmp_path):
    """LibCST's tokenizer counts a tab in an indentation otherwise than Python's (h84's review: a
    WGAN script): the file runs, and gradfix says it cannot read it, and where, not that it is
    invalid."""
    source = (
        "import torch\nimport torch.nn as nn\n\nmodel = nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nlosses = []\n"
        "for step in range(3):\n    loss = model(torch.randn(4, 2)).pow(2).mean()\n    losses.append(loss)\n    opt.zero_grad()\n"
        "    loss.backward()\n    opt.step()\n    if step == 2:\n                with torch.no_grad():\n            \t    x = 1\n"
    )
    compile(source, "s.py", "exec")  # Python reads it
    (tmp_path / "s.py").write_text(source)
    result = cli("check", tmp_path / "s.py")
    assert result.exit_code == 2, result.output
    (line,) = error_lines(result)
    assert line.startswith(f"error: {tmp_path / 's.py'}:15: cannot parse: Python reads this file, but LibCST")
    assert line.endswith("this line's indentation mixes tabs and spaces")
