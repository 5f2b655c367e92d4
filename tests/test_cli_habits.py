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
import typer
from typer.testing import CliRunner

from gradfix import __version__
from gradfix.cli import rule_pages
from gradfix.cli import check_commands
from gradfix.cli import formats, main
from gradfix.cli.app import app
from gradfix.codemods.registry import all_rules, rule_anchor

from .conftest import FIXTURES

ROOT = FIXTURES.parents[1]
DOUBLE = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "before.py").read_text()
DOUBLE_FIXED = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "after.py").read_text()
CLEAN = (FIXTURES / "gf002_separate_backwards" / "ok_two_independent_networks" / "ok.py").read_text()
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


# paths ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["check", "fix"])
def test_check_and_fix_without_a_path_take_the_current_folder(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    script = write(tmp_path / "src" / "train.py", DOUBLE)
    result = cli(command)
    if command == "check":
        assert result.exit_code == 1 and result.stdout.startswith(f"{os.path.join('src', 'train.py')}:19:5: GF002 ")
    else:
        assert result.exit_code == 0 and script.read_text() == DOUBLE_FIXED


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
def test_check_fix_fixes_as_fix_does(tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    result = cli("check", "--fix", script)
    assert result.exit_code == 0, result.output
    assert script.read_text() == DOUBLE_FIXED
    assert "Fixed 1 finding(s) in 1 file(s) (GF002: 1); nothing left to fix." in result.stderr
    assert cli("check", "--fix", "--watch", script).exit_code == 2  # a fix per change is not offered


def test_add_noqa_silences_each_finding_and_keeps_the_rest_of_the_file(tmp_path):
    source = DOUBLE.replace("optimizer.step()", "optimizer.step()  # noqa: E501 (ours)").replace("\n", "\r\n")
    second = source.replace("for step in range(3):", "for step in range(3):  # the epochs")
    second = second.replace("    loss_reg.backward()\r\n", "    loss_reg.backward()  # noqa: E501 long\r\n")
    script = tmp_path / "train.py"
    script.write_bytes(source.encode())
    other = tmp_path / "other.py"
    other.write_bytes(second.encode())
    commented = write(tmp_path / "commented.py", DOUBLE.replace(FINDING_LINE, "    loss_reg.backward()  # see #12\n"))
    result = cli("check", "--add-noqa", tmp_path)
    assert result.exit_code == 0, result.output
    assert "Added 3 `# noqa` comment(s) in 3 file(s)." in result.stderr
    assert commented.read_text() == DOUBLE.replace(FINDING_LINE, "    loss_reg.backward()  # see #12  # noqa: GF002\n")
    assert script.read_bytes() == source.replace(FINDING_LINE.replace("\n", "\r\n"), "    loss_reg.backward()  # noqa: GF002\r\n").encode()
    assert other.read_bytes() == second.replace("# noqa: E501 long", "# noqa: GF002, E501 long").encode()
    assert cli("check", tmp_path).exit_code == 0
    again = cli("check", "--add-noqa", tmp_path)  # nothing left to silence: nothing written
    assert again.exit_code == 0 and "Added 0 `# noqa` comment(s) in 0 file(s)." in again.stderr
    assert script.read_bytes() == source.replace(FINDING_LINE.replace("\n", "\r\n"), "    loss_reg.backward()  # noqa: GF002\r\n").encode()


def test_add_noqa_keeps_the_encoding_and_byte_order_mark(tmp_path):
    source = "# -*- coding: latin-1 -*-\n# café\n" + DOUBLE
    script = tmp_path / "train.py"
    script.write_bytes(b"\xef\xbb\xbf" + DOUBLE.encode())
    latin = tmp_path / "latin.py"
    latin.write_bytes(source.encode("latin-1"))
    assert cli("check", "--add-noqa", tmp_path).exit_code == 0
    noqa = "    loss_reg.backward()  # noqa: GF002\n"
    assert script.read_bytes() == b"\xef\xbb\xbf" + DOUBLE.replace(FINDING_LINE, noqa).encode()
    assert latin.read_bytes() == source.replace(FINDING_LINE, noqa).encode("latin-1")


def test_add_noqa_names_a_notebook_and_leaves_it(tmp_path):
    notebook = tmp_path / "train.ipynb"
    notebook.write_bytes((ROOT / "tests" / "notebooks" / "real_train_loss_summed_as_tensors.ipynb").read_bytes())
    result = cli("check", "--add-noqa", notebook)
    assert result.exit_code == 1
    assert f"warning: {notebook}: a notebook: add its `# noqa` comments in its cells" in result.stderr
    assert notebook.read_bytes() == (ROOT / "tests" / "notebooks" / "real_train_loss_summed_as_tensors.ipynb").read_bytes()


@pytest.mark.parametrize(
    "line, why",
    [
        ('    loss_cls.backward(); note = """the classes\n    head"""\n', "ends inside a string"),
        ("    loss_cls.backward(); note = 1 + \\\n        2\n", "goes on after a backslash"),
    ],
    ids=["multi-line string", "backslash"],
)
def test_add_noqa_skips_a_line_where_a_comment_would_change_the_code(tmp_path, line, why):
    source = DOUBLE.replace("    loss_cls.backward()\n", line)  # a GF010 finding at line 20, then
    script = write(tmp_path / "train.py", source)
    result = cli("check", "--add-noqa", script)
    assert result.exit_code == 1
    assert f"warning: {script}:20: {why}: a comment there would change the code; no `# noqa` added" in result.stderr
    assert "Added 0 `# noqa` comment(s) in 0 file(s)." in result.stderr
    assert script.read_text() == source


def test_add_noqa_cannot_go_with_a_fix_or_stdin(tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    both = cli("check", "--add-noqa", "--fix", script)
    assert both.exit_code == 2 and both.stderr == "error: --add-noqa silences the findings --fix would fix: give one of them\n"
    refused = cli("check", "--add-noqa", "-", input=DOUBLE)
    assert refused.exit_code == 2 and refused.stderr == "error: --add-noqa works on files: it cannot read stdin\n"
    assert cli("check", "--add-noqa", "--watch", script).exit_code == 2
    assert script.read_text() == DOUBLE


# what a run shows -------------------------------------------------------------------------------
def test_show_files_lists_the_files_a_check_would_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "b.py", DOUBLE)
    write(tmp_path / "a" / "train.py", CLEAN)
    write(tmp_path / "build" / "skipped.py", DOUBLE)
    result = cli("check", "--show-files")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{os.path.join('a', 'train.py')}\nb.py\n"
    assert (tmp_path / "b.py").read_text() == DOUBLE


def test_show_settings_says_which_settings_check_the_first_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "pyproject.toml", '[tool.gradfix]\nignore = ["GF001"]\nunsafe-fixes = true\nper-file-ignores = {"tests/*" = ["GF002"]}\n')
    write(tmp_path / "train.py", DOUBLE)
    result = cli("check", "--show-settings", "--extend-exclude", "old", "train.py")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "Settings for: train.py"
    assert lines[1] == f"Settings file: {tmp_path / 'pyproject.toml'}"
    codes = [rule.CODE for rule in all_rules() if rule.CODE != "GF001"]
    assert f"rules = {json.dumps(codes)}" in lines
    assert "unsafe-fixes = true" in lines and "hints = false" in lines
    assert 'extend-exclude = ["old"]' in lines
    assert 'per-file-ignores = {"tests/*" = ["GF002"]}' in lines
    assert any(line.startswith('exclude = [".git", ') for line in lines)


def test_output_file_takes_what_stdout_would_and_is_written_whole(tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    output = tmp_path / "out" / "findings.json"
    output.parent.mkdir()
    result = cli("check", "-o", output, "--output-format", "json", script)
    assert result.exit_code == 1 and result.stdout == ""
    assert [record["code"] for record in json.loads(output.read_text())] == ["GF002"]
    assert "Found 1 finding(s)" not in output.read_text()
    folder = cli("check", "--output-file", tmp_path / "out", script)  # a folder cannot be written
    assert folder.exit_code == 2 and f"error: --output-file {tmp_path / 'out'}: cannot write:" in folder.stderr
    assert sorted(os.listdir(tmp_path / "out")) == ["findings.json"]  # no temporary file left


def test_quiet_prints_the_findings_and_errors_and_nothing_else(tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    empty = tmp_path / "empty"
    empty.mkdir()
    shown = cli("check", "-q", script, empty)
    assert shown.exit_code == 1 and shown.stdout.startswith(f"{script}:19:5: GF002") and shown.stderr == ""
    broken = write(tmp_path / "broken.py", "loss.backward(\n")
    errors = cli("check", "--quiet", broken)
    assert errors.exit_code == 2 and errors.stderr.startswith(f"error: {broken}:1: cannot parse")
    fixed = cli("fix", "-q", script)
    assert fixed.exit_code == 0 and fixed.stderr == "" and script.read_text() == DOUBLE_FIXED
    assert "Found" in cli("check", write(tmp_path / "again.py", DOUBLE)).stderr  # a run without -q says it again


def test_select_all_selects_every_rule(tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    result = cli("check", "--select", "ALL", script)
    assert result.exit_code == 1 and ": GF002 " in result.stdout
    assert cli("check", "--ignore", "ALL", script).exit_code == 0
    assert cli("check", "--select", "ALL", "--ignore", "GF002", script).exit_code == 0


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


def test_fix_diff_show_fixes_says_what_would_be_fixed(tmp_path):
    script = write(tmp_path / "train.py", DOUBLE)
    result = cli("fix", "--diff", "--show-fixes", script)
    assert result.exit_code == 1 and script.read_text() == DOUBLE
    assert f"would fix {script}:19:5: GF002 " in result.stderr
    assert "fixed " not in result.stderr


def test_watch_says_the_projects_totals_after_each_change_in_every_format(tmp_path, monkeypatch):
    script = write(tmp_path / "train.py", CLEAN)
    write(tmp_path / "other.py", DOUBLE)
    looks = []

    class Stop(Exception):
        pass

    real_sleep = check_commands.time.sleep

    def sleep(seconds):
        if seconds != check_commands.WATCH_INTERVAL:
            return real_sleep(seconds)
        looks.append(seconds)
        if len(looks) == 1:
            script.write_text(DOUBLE + "\n")  # another size: a change whatever the clock
        elif len(looks) == 2:
            raise Stop

    monkeypatch.setattr(check_commands.time, "sleep", sleep)
    result = cli("check", "--watch", "--output-format", "concise", tmp_path)
    assert isinstance(result.exception, Stop)
    assert result.stderr.count("Found 1 finding(s) in 1 file(s)") == 1
    assert result.stderr.count("Found 2 finding(s) in 2 file(s)") == 1


# shell completion --------------------------------------------------------------------------------
def test_shell_completion_is_offered_and_completes_commands_and_options(tmp_path, monkeypatch):
    assert "--show-completion" in cli("--help").stdout and "--install-completion" in cli("--help").stdout
    # The shell is named, not detected from the processes above the test (a CI job may have none):
    # typer's own switch for that makes the option take the shell's name.
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    script = cli("--show-completion", "bash", prog_name="gradfix")
    assert script.exit_code == 0 and "_GRADFIX_COMPLETE=complete_bash" in script.stdout
    environment = {**os.environ, "_GRADFIX_COMPLETE": "complete_bash", "COMP_WORDS": "gradfix ch", "COMP_CWORD": "1"}
    commands = subprocess.run([sys.executable, "-m", "gradfix"], env=environment, capture_output=True, text=True)
    assert commands.returncode == 0 and commands.stdout.split() == ["check"]
    environment |= {"COMP_WORDS": "gradfix check --stat", "COMP_CWORD": "2"}
    options = subprocess.run([sys.executable, "-m", "gradfix"], env=environment, capture_output=True, text=True)
    assert options.stdout.split() == ["--statistics"]


# errors in gradfix's words -----------------------------------------------------------------------
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
    assert jobs.startswith("error: --jobs takes 1 or more, not 0")
    _, _, word = run_main(monkeypatch, capsys, "check", "--jobs", "many", ".")
    assert word.startswith("error: --jobs takes a whole number, not 'many'")
    _, _, short = run_main(monkeypatch, capsys, "diagnose", "--timeout", "0.5", "train.py")
    assert short.startswith("error: --timeout takes 1 or more, not 0.5")
    _, _, words = run_main(monkeypatch, capsys, "diagnose", "--timeout", "long", "train.py")
    assert words.startswith("error: --timeout takes a number, not 'long'")


def test_the_entry_point_keeps_its_exit_statuses(monkeypatch, capsys, tmp_path):
    assert run_main(monkeypatch, capsys, "--version")[:2] == (0, f"gradfix {__version__}\n")
    assert run_main(monkeypatch, capsys, "check", "--help")[0] == 0
    status, out, err = run_main(monkeypatch, capsys)
    assert status == 2 and "Usage" in out + err  # no command: the help
    write(tmp_path / "train.py", DOUBLE)
    assert run_main(monkeypatch, capsys, "check", tmp_path)[0] == 1
    assert run_main(monkeypatch, capsys, "explain", "GF999")[0] == 2


# SARIF ------------------------------------------------------------------------------------------
def test_semantic_version_maps_pep_440_to_semver():
    assert formats.semantic_version("0.2.0.dev0") == "0.2.0-dev.0"
    assert formats.semantic_version("1.4") == "1.4.0"
    assert formats.semantic_version("2.0.1rc2") == "2.0.1-rc.2"
    assert formats.semantic_version("1!3.1b1.dev4") == "3.1.0-b.1.dev.4"
    assert formats.semantic_version("1.0.post2+ubuntu.1") == "1.0.0+post.2.ubuntu.1"
    for version in ("0.2.0.dev0", "1.4", "2.0.1rc2", "1!3.1b1.dev4", "1.0.post2+ubuntu.1", __version__):
        assert SEMVER.match(formats.semantic_version(version)), version


def test_sarif_regions_end_where_the_finding_ends_and_rules_link_to_their_page(tmp_path, monkeypatch):
    page = "https://github.com/someone/gradfix/blob/0123abc/docs/rules.md"  # as a GitHub install names it
    monkeypatch.setattr(rule_pages, "_rules_page", lambda: page)
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


# docs -------------------------------------------------------------------------------------------
def test_the_reference_lists_every_command_and_option():
    reference = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        assert f"gradfix {name}" in reference, name
        for parameter in command.params:
            for option in [*parameter.opts, *parameter.secondary_opts]:
                if option.startswith("-"):
                    assert re.search(rf"`{re.escape(option)}\b", reference), f"gradfix {name} {option}"
    for parameter in group.params:
        for option in parameter.opts:
            assert re.search(rf"`{re.escape(option)}\b", reference), option
