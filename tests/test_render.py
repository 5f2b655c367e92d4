"""Text of the checked files (quoted code, a path) as gradfix prints it for people: shown, never
obeyed. No control character reaches the terminal and no printed line is a CI runner's workflow
command, in every human format: the finding lines of `text` and `concise`, coloured or piped, the
errors and fixed findings on stderr, a diff shown in a terminal, the lines diagnose quotes."""

import io
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gradfix.cli import render
from gradfix.cli.app import app

from .conftest import FIXTURES

HOISTED = (FIXTURES / "gf003_forward_outside_loop" / "loss_hoisted" / "before.py").read_text()
# A backward after its loop (GF008, an unsafe fix) that quotes a string spanning lines: a workflow
# command on a line of its own, a legacy one inside a line, a terminal's CSI and OSC sequences, a
# bell, DEL, a C1 control, a right-to-left override and a line separator.
HOSTILE = '''\
import torch
model = torch.nn.Linear(1, 1)
for x in range(3):
    loss = model(torch.ones(1)).sum()
loss.backward(inputs=d["""
::error file=a.py::pwned
  ::add-mask::secret ##[stop-commands]token
\x1b[2J\x1b]0;title\x07 \x7f \x9b \u202e \u2028"""])
'''
# What a runner obeys: a line that starts with `::` after blanks, `##[` anywhere in a line.
WORKFLOW_COMMAND = re.compile(r"^\s*::|##\[", re.MULTILINE)
RICH_STYLES = re.compile(r"\x1b\[[0-9;]*m")  # the colours rich writes itself


def unprintable(text: str) -> list[str]:
    """Characters Python would not print as they are, other than the line ends."""
    return [character for character in text if not character.isprintable() and character != "\n"]


def hostile_tree(folder: Path) -> Path:
    (folder / "train.py").write_text(HOSTILE)
    (folder / "x\n::error file=a.py::named \x1b[2J.py").write_text(HOISTED)  # a path is text of the tree too
    (folder / b"latin1-\xe9.py".decode("utf-8", "surrogateescape")).write_text(HOISTED)  # a lone surrogate
    (folder / "broken \x1b]0;x\x07.py").write_text("x = (\n")
    return folder


def assert_shown_not_obeyed(output: str) -> None:
    assert unprintable(output) == [], output
    assert WORKFLOW_COMMAND.search(output) is None, output


@pytest.mark.parametrize("output_format", ["text", "concise"])
def test_a_finding_quoting_control_characters_and_workflow_commands_prints_them_escaped(tmp_path, output_format):
    result = CliRunner().invoke(app, ["check", "--output-format", output_format, str(hostile_tree(tmp_path))])
    assert result.exit_code == 2, result.output  # findings, and a file that does not parse
    assert_shown_not_obeyed(result.stdout)
    assert_shown_not_obeyed(result.stderr)
    [quoting] = [line for line in result.stdout.splitlines() if "GF008" in line]  # one line
    assert quoting.startswith(f"{tmp_path / 'train.py'}:5:1: GF008 `loss.backward(inputs=d[")
    assert '"""\\n::error file=a.py::pwned\\n  ::add-mask::secret ##\\x5bstop-commands]token\\n' in quoting
    assert '\\x1b[2J\\x1b]0;title\\x07 \\x7f \\x9b \\u202e \\u2028"""' in quoting
    assert f"{tmp_path}/x\\n::error file=a.py::named \\x1b[2J.py:12:1: GF003" in result.stdout
    assert f"{tmp_path}/latin1-\\udce9.py:12:1: GF003" in result.stdout
    assert f"error: {tmp_path}/broken \\x1b]0;x\\x07.py:1: cannot parse" in result.stderr


def terminal(monkeypatch) -> io.StringIO:
    """What gradfix writes to a colour terminal on stdout and stderr, in one buffer."""
    screen = io.StringIO()

    def console(stderr: bool = False) -> Console:
        return Console(file=screen, force_terminal=True, color_system="standard", highlight=False, soft_wrap=True, markup=False)

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(render, "_stdout", console)
    monkeypatch.setattr(render, "stderr", console(stderr=True))
    return screen


def test_in_a_colour_terminal_findings_fixes_errors_and_diffs_reach_it_escaped(tmp_path, monkeypatch):
    screen = terminal(monkeypatch)
    hostile_tree(tmp_path)
    checked = CliRunner().invoke(app, ["check", "--unsafe-fixes", str(tmp_path)])  # each unsafe fix's diff too
    fixed = CliRunner().invoke(app, ["fix", "--unsafe-fixes", "--show-fixes", str(tmp_path)])
    assert (checked.exit_code, fixed.exit_code) == (2, 2), checked.output + fixed.output
    shown = screen.getvalue()
    for kind in ("GF008 `loss.backward", "fixed ", "error: ", "+++ ", "+    loss.backward"):
        assert kind in shown
    assert_shown_not_obeyed(RICH_STYLES.sub("", shown))
    assert "\\x1b[2J\\x1b]0;title\\x07" in shown


def test_a_piped_diff_keeps_the_files_bytes_for_git_apply(tmp_path):
    (tmp_path / "train.py").write_text(HOSTILE)
    result = CliRunner().invoke(app, ["fix", "--unsafe-fixes", "--diff", str(tmp_path / "train.py")])
    assert result.exit_code == 1, result.output
    assert "\n ::error file=a.py::pwned\n" in result.stdout and "\x1b[2J\x1b]0;title\x07" in result.stdout


def test_diagnose_shows_the_lines_it_quotes_escaped(warm_cli, tmp_path):
    script = tmp_path / "twice.py"
    script.write_text(
        "import torch\nw = torch.ones(1, requires_grad=True)\ny = (w * 2).sum()\ny.backward()\ny.backward()  # \x1b]0;x\x07 ##[error]x\n"
    )
    result = warm_cli("diagnose", script)
    assert result.exit_code == 1, result.output
    explained, _, diff = result.stdout.partition("  fix:\n")
    assert "  failed at  line 5: y.backward()  # \\x1b]0;x\\x07 ##\\x5berror]x   (on its 1st call)\n" in explained
    assert_shown_not_obeyed(explained)
    assert "\n-y.backward()  # \x1b]0;x\x07 ##[error]x\n" in diff  # piped: the file's bytes


@pytest.mark.parametrize(
    "text, shown",
    [
        ("".join(map(chr, range(32))), "".join(ascii(chr(c))[1:-1] for c in range(32))),  # all of C0
        ("\x7f\x80\x9f", "\\x7f\\x80\\x9f"),  # DEL, C1
        ("\ud800 \udfff", "\\ud800 \\udfff"),  # lone surrogates
        ("\u2028\u2029\u202e\u200b\ufeff", "\\u2028\\u2029\\u202e\\u200b\\ufeff"),  # separators, format characters
        ("::error::x", "\\x3a:error::x"),
        ("  ::warning::x", "  \\x3a:warning::x"),
        ("path: ::x and ##[error]y", "path: ::x and ##\\x5berror]y"),
        ("é, 中文, emoji 🙂, back\\slash", "é, 中文, emoji 🙂, back\\slash"),  # printable text as it is
    ],
)
def test_a_printed_line_escapes_what_a_terminal_or_runner_would_obey(text, shown):
    assert render.printed_line(text) == shown
