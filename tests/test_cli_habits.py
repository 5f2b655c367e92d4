"""What a ruff user expects of gradfix's command line (issue 39, item 5): `check` with no path,
`check --fix`, `--add-noqa`, `--show-settings`/`--show-files`, `-o`, `-q`, `--select ALL`, `-V`,
`rule`, shell completion, "Would fix" under `--diff`, SARIF regions and rule links, plain-text
explanations, errors in gradfix's words, `--watch` totals, dangling links in a walk."""

import json
import os
import re
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from gradfix import __version__
from gradfix.cli import formats, main
from gradfix.cli.app import app
from gradfix.codemods.registry import all_rules, rule_anchor

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


def test_the_version_has_ruffs_short_option():
    result = cli("-V")
    assert result.exit_code == 0 and result.stdout == f"gradfix {__version__}\n"


def test_rule_is_explain():
    assert cli("rule", "GF001").stdout == cli("explain", "GF001").stdout
    assert cli("rule", "GF001").stdout.startswith("GF001 duplicate_backward: ")
    assert cli("rule", "GF999").exit_code == 2


def test_explanations_in_plain_text_have_no_rest_markup():
    for rule in all_rules():
        explained = cli("explain", rule.CODE).stdout
        assert "``" not in explained, rule.CODE
    assert "The first `loss.backward()` walks the graph" in cli("explain", "GF001").stdout


def test_shell_completion_is_offered_and_completes_commands_and_options(tmp_path):
    assert "--show-completion" in cli("--help").stdout and "--install-completion" in cli("--help").stdout
    script = cli("--show-completion", "bash", prog_name="gradfix")
    assert script.exit_code == 0 and "_GRADFIX_COMPLETE=complete_bash" in script.stdout
    environment = {**os.environ, "_GRADFIX_COMPLETE": "complete_bash", "COMP_WORDS": "gradfix ch", "COMP_CWORD": "1"}
    commands = subprocess.run([sys.executable, "-m", "gradfix"], env=environment, capture_output=True, text=True)
    assert commands.returncode == 0 and commands.stdout.split() == ["check"]
    environment |= {"COMP_WORDS": "gradfix check --stat", "COMP_CWORD": "2"}
    options = subprocess.run([sys.executable, "-m", "gradfix"], env=environment, capture_output=True, text=True)
    assert options.stdout.split() == ["--statistics"]


@pytest.mark.parametrize(
    "arguments, said",
    [
        (["check", "--jo", "2", "."], "error: unknown option --jo (did you mean --jobs?)"),
        (["check", "--no-such-thing", "."], "error: unknown option --no-such-thing"),
        (["check", "--jobs", "0", "."], "error: --jobs"),
        (["check", "--jobs", "many", "."], "error: --jobs"),
        (["check", "--output-format", "xml", "."], "error: --output-format: 'xml' is not one of"),
        (["explain"], "error: missing RULE"),
        (["diagnose", "--timeout", "0.5", "train.py"], "error: --timeout"),
    ],
)
def test_usage_errors_are_said_in_gradfixs_words(monkeypatch, capsys, arguments, said):
    status, out, err = run_main(monkeypatch, capsys, *arguments)
    assert status == 2 and out == ""
    assert err.startswith(said), err
    assert len(err.splitlines()) == 1, err
    for foreign in ("Value error", "Input should", "Possible options", "Usage:", "Error:"):
        assert foreign not in err, err
    assert f"`gradfix {arguments[0]} -h`" in err


def test_a_usage_error_names_the_values_an_option_takes(monkeypatch, capsys):
    _, _, jobs = run_main(monkeypatch, capsys, "check", "--jobs", "0", ".")
    assert jobs.startswith("error: --jobs takes 1 or more, not 0") or "0 is not in the range" in jobs  # (click without pydantic)
    _, _, word = run_main(monkeypatch, capsys, "check", "--jobs", "many", ".")
    assert word.startswith("error: --jobs takes a whole number, not 'many'") or "is not a valid integer" in word


def test_the_entry_point_keeps_its_exit_statuses(monkeypatch, capsys, tmp_path):
    assert run_main(monkeypatch, capsys, "--version")[:2] == (0, f"gradfix {__version__}\n")
    assert run_main(monkeypatch, capsys, "check", "--help")[0] == 0
    status, out, err = run_main(monkeypatch, capsys)
    assert status == 2 and "Usage" in out + err  # no command: the help
    write(tmp_path / "train.py", DOUBLE)
    assert run_main(monkeypatch, capsys, "check", tmp_path)[0] == 1
    assert run_main(monkeypatch, capsys, "explain", "GF999")[0] == 2


def test_semantic_version_maps_pep_440_to_semver():
    assert formats.semantic_version("0.2.0.dev0") == "0.2.0-dev.0"
    assert formats.semantic_version("1.4") == "1.4.0"
    assert formats.semantic_version("2.0.1rc2") == "2.0.1-rc.2"
    assert formats.semantic_version("1!3.1b1.dev4") == "3.1.0-b.1.dev.4"
    assert formats.semantic_version("1.0.post2+ubuntu.1") == "1.0.0+post.2.ubuntu.1"
    for version in ("0.2.0.dev0", "1.4", "2.0.1rc2", "1!3.1b1.dev4", "1.0.post2+ubuntu.1", __version__):
        assert SEMVER.match(formats.semantic_version(version)), version


def test_sarif_regions_end_where_the_finding_ends_and_rules_link_to_their_page(tmp_path, monkeypatch):
    server = pytest.importorskip("gradfix.cli.server", reason="the rules page link is the language server's")
    page = "https://github.com/someone/gradfix/blob/0123abc/docs/rules.md"  # as a GitHub install names it
    monkeypatch.setattr(server, "_rules_page", lambda: page)
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "train.py", DOUBLE)
    run = json.loads(cli("check", "--output-format", "sarif", "train.py").stdout)["runs"][0]
    assert SEMVER.match(run["tool"]["driver"]["semanticVersion"])
    [result] = run["results"]
    [record] = json.loads(cli("check", "--output-format", "json", "train.py").stdout)
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 19, "startColumn": 5, "endLine": record["end_line"], "endColumn": record["end_column"]}
    for rule in run["tool"]["driver"]["rules"]:
        assert rule["helpUri"] == f"{page}#{rule_anchor(rule['id'])}"
        assert "``" not in rule["help"]["text"] and "``" not in rule["fullDescription"]["text"]
