"""Notebooks: checked and fixed as the Python of their code cells, written back cell by cell."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gradfix.cli.app import app
from gradfix.codemods import files
from gradfix.codemods import notebook as notebook_module
from gradfix.codemods.check import check_source
from gradfix.codemods.report import FixMode
from gradfix.codemods.notebook import Notebook, NotebookError
from gradfix.codemods.registry import all_rules

FIXTURES = Path(__file__).parent / "fixtures"
REPORTED = Path(__file__).parent / "notebooks" / "reported_labels_built_from_trained_weights.ipynb"
HOISTED = FIXTURES / "gf003_forward_outside_loop" / "loss_hoisted"
OUTPUT = {"output_type": "stream", "name": "stdout", "text": ["0 0.93\n"]}


def notebook_of(*cells: str, language: str = "python") -> bytes:
    """A notebook as Jupyter writes it: a markdown cell first, then one code cell per text,
    each with an output."""
    document = {
        "cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# Training\n", "notes"]}]
        + [
            {"cell_type": "code", "execution_count": i, "metadata": {"tags": []}, "outputs": [OUTPUT], "source": text.splitlines(keepends=True)}
            for i, text in enumerate(cells, start=1)
        ],
        "metadata": {"kernelspec": {"name": "python3"}, "language_info": {"name": language}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return (json.dumps(document, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()


def hoisted_notebook() -> bytes:
    """The loss_hoisted fixture in three cells, with a magic and a shell line."""
    setup, _, training = HOISTED.joinpath("before.py").read_text().partition("\nloss = ")
    return notebook_of(
        "%matplotlib inline\n!pip install torch\n" + setup, "loss = " + training.split("\nfor ")[0], "for " + training.split("\nfor ", 1)[1]
    )


def code_of(data: bytes) -> str:
    cells = json.loads(data)["cells"]
    return "".join("".join(c["source"]) + "\n" for c in cells if c["cell_type"] == "code")


def test_magics_and_shell_lines_become_statements_and_come_back_unchanged():
    data = notebook_of("%matplotlib inline\n!pip install torch\nfiles = !ls\nimport torch\nx = torch.ones(2)\nx?\ntorch.*Tensor?", "%%bash\necho hi")
    notebook = Notebook(data, "nb.ipynb")
    source = notebook.source.decode()
    assert "\nimport torch\nx = torch.ones(2)\n" in source
    for magic in ("%matplotlib inline", "!pip install torch", "files = !ls", "x?", "torch.*Tensor?", "%%bash", "echo hi"):
        assert f"pass  # gradfix-magic: {magic}\n" in source
    compile(source, "nb", "exec")
    assert notebook.with_source(notebook.source) == data


def test_shell_lines_under_a_python_cell_magic_are_masked():
    # The first cell of Lightning's examples/pytorch/bug_report/bug_report_model.ipynb.
    data = notebook_of("%%capture\n! pip install -qU pytorch-lightning", "import torch")
    source = Notebook(data, "nb.ipynb").source.decode()
    assert "pass  # gradfix-magic: ! pip install -qU pytorch-lightning\n" in source
    compile(source, "nb", "exec")


def test_a_python_cell_magic_runs_its_body_as_a_cell_that_may_start_with_a_cell_magic():
    # deep-rl-class's unit8 notebook (h90): `%%capture` hands its body to IPython as a cell of its
    # own, whose `%%bash` makes the rest shell lines, never Python.
    data = notebook_of("%%capture\n%%bash\n\napt-get install build-essential zlib1g-dev \\\nnasm tar\necho done\n", "import torch")
    source = Notebook(data, "nb.ipynb").source.decode()
    for line in ("%%capture", "%%bash", "apt-get install build-essential zlib1g-dev \\", "nasm tar", "echo done"):
        assert f"pass  # gradfix-magic: {line}\n" in source
    compile(source, "nb", "exec")


def test_shell_lines_continued_by_a_backslash_and_magics_that_are_a_whole_block_are_masked():
    # IPython joins a shell line ending with a backslash to the next, and runs `!cmd` or `%time`
    # as the whole body of an `if` or `with`.
    data = notebook_of(
        "!pip install --quiet \\\n    torch \\\n  numpy\nimport torch\n",
        "if torch.cuda.is_available():\n    !nvidia-smi\nwith torch.no_grad():\n    %time torch.ones(2)\n    x = 1\n",
    )
    notebook = Notebook(data, "nb.ipynb")
    source = notebook.source.decode()
    assert "pass  # gradfix-magic: !pip install --quiet \\\npass  # gradfix-magic:     torch \\\npass  # gradfix-magic:   numpy\n" in source
    assert ":\n    pass  # gradfix-magic:     !nvidia-smi\n" in source
    assert ":\n    pass  # gradfix-magic:     %time torch.ones(2)\n    x = 1\n" in source
    compile(source, "nb", "exec")
    assert notebook.with_source(notebook.source) == data


def test_a_fix_keeps_continued_shell_lines_and_magics_that_are_a_whole_block():
    setup, _, training = HOISTED.joinpath("before.py").read_text().partition("\nloss = ")
    magics = "!pip install \\\n    torch\nif torch.cuda.is_available():\n    !nvidia-smi\n"
    original = notebook_of(setup, magics, "loss = " + training.split("\nfor ")[0], "for " + training.split("\nfor ", 1)[1])
    report = check_source(original, all_rules(), FixMode.SAFE, "train.ipynb")
    assert [f.code for f in report.fixed] == ["GF003"] and not report.findings and not report.errors
    cells = json.loads(report.rewritten)["cells"]
    assert "".join(cells[2]["source"]) == magics
    assert code_of(report.rewritten).replace(magics, "").split() == HOISTED.joinpath("after.py").read_text().split()


def test_a_cell_indented_as_a_whole_is_checked_as_ipython_runs_it_and_fixed_in_its_indentation():
    # IPython strips the first line's indentation from every line of a cell before running it.
    setup, _, training = HOISTED.joinpath("before.py").read_text().partition("\nloss = ")
    indented = "".join(" " + line if line.strip() else line for line in ("loss = " + training).splitlines(keepends=True))
    original = notebook_of(setup, indented)
    assert Notebook(original, "nb.ipynb").with_source(Notebook(original, "nb.ipynb").source) == original
    report = check_source(original, all_rules(), FixMode.SAFE, "train.ipynb")
    assert [f.code for f in report.fixed] == ["GF003"] and not report.findings and not report.errors
    cells = json.loads(report.rewritten)["cells"]
    fixed = "".join(cells[2]["source"])
    assert all(line.startswith(" ") for line in fixed.splitlines() if line.strip())
    assert (setup + "\n" + fixed.replace("\n ", "\n")[1:]).split() == HOISTED.joinpath("after.py").read_text().split()


def test_findings_are_placed_by_cell_and_messages_name_cells():
    report = check_source(hoisted_notebook(), all_rules(), path="train.ipynb")
    [finding] = report.findings
    assert (finding.code, finding.cell, finding.line) == ("GF003", 3, 1)
    assert finding.render().startswith("train.ipynb:cell 3:1:1: GF003")
    assert "before the loop at cell 4, line 1" in finding.message


def test_a_fix_rewrites_only_the_cells_it_changes_and_keeps_outputs_and_metadata():
    original = hoisted_notebook()
    report = check_source(original, all_rules(), FixMode.SAFE, "train.ipynb")
    assert [f.code for f in report.fixed] == ["GF003"] and not report.findings
    before, after = json.loads(original), json.loads(report.rewritten)
    assert after["metadata"] == before["metadata"]
    for old, new in zip(before["cells"], after["cells"]):
        assert {k: v for k, v in old.items() if k != "source"} == {k: v for k, v in new.items() if k != "source"}
    changed = [i for i, (old, new) in enumerate(zip(before["cells"], after["cells"])) if old["source"] != new["source"]]
    assert changed == [2, 3]  # the loss leaves cell 3 for the loop in cell 4
    assert "%matplotlib inline\n" in after["cells"][1]["source"]
    expected = HOISTED.joinpath("after.py").read_text()
    assert code_of(report.rewritten).replace("%matplotlib inline\n!pip install torch\n", "").split() == expected.split()


def test_diff_is_the_notebook_files_and_git_apply_takes_it_with_a_scripts(tmp_path):
    original = hoisted_notebook()
    report = check_source(original, all_rules(), FixMode.SAFE, "train.ipynb")
    diff = files.unified_diff(report)
    assert diff.startswith("--- a/train.ipynb\n+++ b/train.ipynb\n")
    assert [line.split("@@ ")[-1] for line in diff.splitlines() if line.startswith("@@")] == ["cell 3", "cell 4"]
    assert '+    "    loss = criterion(model(x), y)\\n",\n' in diff
    assert "matplotlib" not in diff  # cell 2 did not change
    first_cell = original.split(b'"# Training\\n"')[0]
    assert report.rewritten.startswith(first_cell)
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    (tmp_path / "train.ipynb").write_bytes(original)
    script = tmp_path / "train.py"
    script.write_text(HOISTED.joinpath("before.py").read_text())
    patch = subprocess.run(
        [sys.executable, "-m", "gradfix", "fix", "--diff", "train.ipynb", "train.py"], cwd=tmp_path, capture_output=True, text=True
    )
    assert patch.returncode == 1, patch.stderr
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "apply"], cwd=tmp_path, input=patch.stdout, text=True, check=True)
    assert (tmp_path / "train.ipynb").read_bytes() == report.rewritten
    assert script.read_text() == HOISTED.joinpath("after.py").read_text()


@pytest.mark.parametrize(
    "layout",
    [{"indent": 4, "ensure_ascii": True}, {"indent": "\t"}, {"separators": (",", ":")}, {"indent": 2, "sort_keys": True}],
    ids=["indent-4-ascii", "tabs", "one-line", "sorted"],
)
def test_a_fix_keeps_the_notebooks_own_layout(layout):
    document = json.loads(hoisted_notebook())
    document["metadata"]["title"] = "Entraînement"  # text ensure_ascii escapes
    for cell in document["cells"]:  # not Jupyter's key order
        cell.update(reversed(list(cell.items())))
    original = json.dumps(document, **layout).encode()
    report = check_source(original, all_rules(), FixMode.SAFE, "train.ipynb")
    assert [f.code for f in report.fixed] == ["GF003"]
    assert json.loads(report.rewritten)["cells"][3]["source"][1] == "    loss = criterion(model(x), y)\n"
    changed = [line for line in files.unified_diff(report).splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert len(changed) <= 6, changed  # the lines of the two sources that changed, not the file
    before, after = original.decode(), report.rewritten.decode()
    assert before[: before.index('"source"')] == after[: after.index('"source"')]  # the first cell's bytes and all before them


def test_related_lines_name_their_cells_in_json_and_sarif(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.ipynb").write_bytes(hoisted_notebook())
    [record] = json.loads(CliRunner().invoke(app, ["check", "--output-format", "json", "train.ipynb"]).stdout)
    assert (record["cell"], record["line"], record["related_cells"], record["related_lines"]) == (3, 1, [4, 4], [1, 3])
    log = json.loads(CliRunner().invoke(app, ["check", "--output-format", "sarif", "train.ipynb"]).stdout)
    [result] = log["runs"][0]["results"]
    lines = hoisted_notebook().decode().splitlines()
    related = [lines[r["physicalLocation"]["region"]["startLine"] - 1].strip() for r in result["relatedLocations"]]
    assert related == ['"for it in range(6):\\n",', '"    loss.backward()\\n",']
    script_record = json.loads(CliRunner().invoke(app, ["check", "--output-format", "json", str(HOISTED / "before.py")]).stdout)[0]
    assert script_record["related_cells"] is None


def test_a_rewrite_that_crosses_a_cell_boundary_is_refused():
    notebook = Notebook(hoisted_notebook(), "train.ipynb")
    without_marker = b"\n".join(line for line in notebook.source.split(b"\n") if not line.startswith(b"pass  # gradfix-cell 3"))
    with pytest.raises(NotebookError, match="across cells"):
        notebook.with_source(without_marker)


@pytest.mark.parametrize("rewrite", ["moved into the loop", "removed"])
def test_a_rewrite_that_moves_or_removes_a_magic_line_is_refused(rewrite):
    notebook = Notebook(notebook_of("import torch", "!nvidia-smi\nfor step in range(3):\n    x = torch.ones(2)\n"), "train.ipynb")
    masked = b"pass  # gradfix-magic: !nvidia-smi\n"
    kept = masked.replace(b"pass", b"    pass") if rewrite == "moved into the loop" else b""
    rewritten = notebook.source.replace(masked, b"").replace(b"    x = ", kept + b"    x = ")
    with pytest.raises(NotebookError, match="moved a magic or shell line of cell 3"):
        notebook.with_source(rewritten)


def test_cli_walks_notebooks_and_fixes_them(tmp_path):
    (tmp_path / "train.ipynb").write_bytes(hoisted_notebook())
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "train-checkpoint.ipynb").write_bytes(hoisted_notebook())
    checked = CliRunner().invoke(app, ["check", str(tmp_path)])
    assert checked.exit_code == 1
    assert f"{tmp_path / 'train.ipynb'}:cell 3:1:1: GF003" in checked.stdout
    assert "checkpoint" not in checked.stdout
    fixed = CliRunner().invoke(app, ["fix", str(tmp_path / "train.ipynb")])
    assert fixed.exit_code == 0, fixed.output
    assert json.loads((tmp_path / "train.ipynb").read_bytes())["cells"][3]["source"][1] == "    loss = criterion(model(x), y)\n"


def test_bad_and_foreign_notebooks(tmp_path):
    broken = tmp_path / "broken.ipynb"
    broken.write_text('{"cells": [ {"source": "loss.backward()"')
    result = CliRunner().invoke(app, ["check", str(broken)])
    assert result.exit_code == 2 and "broken.ipynb: not a Jupyter notebook" in result.stderr
    r_notebook = tmp_path / "analysis.ipynb"
    r_notebook.write_bytes(notebook_of("loss <- backward(model)\nloss.backward()", language="R"))
    result = CliRunner().invoke(app, ["check", str(r_notebook)])
    assert result.exit_code == 0 and "No findings" in result.stderr


def test_diagnose_fix_repairs_a_reported_notebook_in_its_cells(warm_cli, tmp_path):
    notebook = tmp_path / "fc.ipynb"
    shutil.copy(REPORTED, notebook)
    result = warm_cli("diagnose", "--fix", notebook)
    assert result.exit_code == 0, result.output
    assert "graph from cell 3, line 7: Y = torch.mm(X, true_W) + true_b" in result.stdout
    assert "fixed" in result.stderr and "gradients equal the retain_graph=True run" in result.stderr
    before, after = json.loads(REPORTED.read_bytes()), json.loads(notebook.read_bytes())
    changed = [(i, new["source"]) for i, (old, new) in enumerate(zip(before["cells"], after["cells"])) if old != new]
    assert len(changed) == 1 and changed[0][0] == 2
    assert changed[0][1][-1] in ("Y = (torch.mm(X, true_W) + true_b).detach()", "with torch.no_grad():\n")
    assert after["cells"][5]["outputs"] == before["cells"][5]["outputs"]
    assert [p.name for p in tmp_path.iterdir()] == ["fc.ipynb"]  # the script it ran is gone


def json_notebook(cell_metadata: str = "{}", source: str = '"loss.backward()\\n"', top: str = '"cells"') -> str:
    """A notebook's JSON text, spelled out: one code cell, with ``cell_metadata`` and ``source``
    written as given, in the value of the key ``top`` (``"cells": null, "cells"`` repeats it)."""
    cell = f'{{"cell_type": "code", "execution_count": 1, "metadata": {cell_metadata}, "outputs": [], "source": {source}}}'
    return f'{{{top}: [{cell}], "metadata": {{}}, "nbformat": 4, "nbformat_minor": 5}}'


DEPTH = 100_000  # far past the recursion limit
UNREADABLE_NOTEBOOKS = {
    "nested deep": json_notebook(cell_metadata='{"outputs": ' + "[" * DEPTH + "]" * DEPTH + "}"),
    "lone surrogate": json_notebook(source='"x = \\"\\ud800\\"\\nloss.backward()\\n"'),
    "deep cell metadata": json_notebook(cell_metadata='{"a": ' * DEPTH + "1" + "}" * DEPTH),
    "repeated key": json_notebook(top='"cells": null, "cells"'),
}


@pytest.mark.parametrize("text", UNREADABLE_NOTEBOOKS.values(), ids=UNREADABLE_NOTEBOOKS.keys())
def test_a_notebook_that_cannot_be_read_is_an_error_of_its_own_and_the_other_files_are_fixed(tmp_path, text):
    (tmp_path / "bad.ipynb").write_text(text)
    (tmp_path / "train.py").write_text(HOISTED.joinpath("before.py").read_text())
    result = CliRunner().invoke(app, ["fix", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"error: {tmp_path / 'bad.ipynb'}: not a Jupyter notebook (" in result.stderr
    assert "internal error" not in result.stderr
    assert (tmp_path / "train.py").read_text() == HOISTED.joinpath("after.py").read_text()
    assert (tmp_path / "bad.ipynb").read_text() == text


def test_a_notebook_gradfix_fails_on_is_an_internal_error_of_its_own_and_the_other_files_are_fixed(tmp_path, monkeypatch):
    def unforeseen(document):
        raise KeyError("cells")

    monkeypatch.setattr(notebook_module, "_malformation", unforeseen)
    (tmp_path / "train.ipynb").write_bytes(hoisted_notebook())
    (tmp_path / "train.py").write_text(HOISTED.joinpath("before.py").read_text())
    result = CliRunner().invoke(app, ["fix", "--jobs", "1", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"error: {tmp_path / 'train.ipynb'}: internal error: KeyError: 'cells'; the file was left as it was" in result.stderr
    assert (tmp_path / "train.py").read_text() == HOISTED.joinpath("after.py").read_text()
    assert (tmp_path / "train.ipynb").read_bytes() == hoisted_notebook()


def test_a_syntax_error_is_placed_by_cell(tmp_path):
    broken = tmp_path / "broken.ipynb"
    broken.write_bytes(notebook_of("import torch", "for step in range(3):\n    loss.backward(\n"))
    result = CliRunner().invoke(app, ["check", str(broken)])
    assert result.exit_code == 2
    assert f"{broken}:cell 3:2: cannot parse: '(' was never closed" in result.stderr
    # Python words an unterminated string "(detected at line N)", N counted in the whole module:
    # in a notebook that is no line of the cell the error is placed in.
    broken.write_bytes(notebook_of("import torch\nx = 1\ny = 2", "print('unterminated)\n"))
    result = CliRunner().invoke(app, ["check", str(broken)])
    assert f"{broken}:cell 3:1: cannot parse: unterminated string literal\n" in result.stderr
    # An exercise's empty block (dataflowr's notebooks): Python places it past the cell's last line,
    # and names the `def` by its line in the whole module.
    broken.write_bytes(notebook_of("import torch\nx = 1", "def step():\n    # your code here\n", "y = 2"))
    result = CliRunner().invoke(app, ["check", str(broken)])
    assert f"{broken}:cell 3:2: cannot parse: expected an indented block after function definition on cell 3, line 1\n" in result.stderr
    opened = tmp_path / "docstring.py"
    opened.write_text('import torch\n"""opened\n\nnever closed\n')
    result = CliRunner().invoke(app, ["check", str(opened)])
    assert f"{opened}:2: cannot parse: unterminated triple-quoted string literal (noticed 2 lines below)" in result.stderr


def test_a_real_course_notebook_keeps_every_batch_graph_in_its_epoch_loss():
    real = Path(__file__).parent / "notebooks" / "real_train_loss_summed_as_tensors.ipynb"
    # `model` and `loss_fn` are train_step's parameters: what they run is not read, so the detach is unsafe.
    report = check_source(real.read_bytes(), all_rules(), FixMode.UNSAFE, "course.ipynb")
    [fixed] = report.fixed
    assert (fixed.code, fixed.cell, fixed.line) == ("GF007", 4, 17)
    cells = json.loads(report.rewritten)["cells"]
    assert cells[3]["source"][16] == "        train_loss += loss.detach()\n"
    assert cells[4]["source"][0] == "%%time\n"


def test_a_future_import_that_opens_a_later_cell_compiles_where_jupyter_runs_it():
    setup, _, training = HOISTED.joinpath("before.py").read_text().partition("\nloss = ")
    data = notebook_of(setup, "from __future__ import print_function\nloss = " + training)
    report = check_source(data, all_rules(), path="train.ipynb")
    assert not report.errors
    assert [f.code for f in report.findings] == ["GF003"]


COMMENTED = FIXTURES / "gf003_forward_outside_loop" / "comments_and_formatting"


def test_automagic_lines_are_masked_and_the_rest_of_the_cell_is_checked():
    # IPython runs a line magic typed without its `%` (`cd data`, `pip install torch`); a line
    # that is also Python (`ls -la`, `pwd`) it reads as Python in a cell of several lines.
    setup, _, training = HOISTED.joinpath("before.py").read_text().partition("\nloss = ")
    automagics = "pip install torch\ncd data\nconda install -y pytorch \\\n    torchvision\nmkdir out\ncd -\nls -la\n"
    notebook = Notebook(notebook_of(automagics + setup, "loss = " + training), "nb.ipynb")
    source = notebook.source.decode()
    for line in ("pip install torch", "cd data", "conda install -y pytorch \\", "    torchvision", "mkdir out", "cd -"):
        assert f"pass  # gradfix-magic: {line}\n" in source
    assert "\nls -la\n" in source
    report = check_source(notebook_of(automagics + setup, "loss = " + training), all_rules(), path="train.ipynb")
    assert not report.errors
    assert [(f.code, f.cell, f.line) for f in report.findings] == [("GF003", 3, 1)]


def test_python_that_starts_with_a_line_magics_name_is_python():
    # The first line of each statement does not compile alone; none is a command.
    code = "config = dict(\n    lr=1e-3,\n)\nhistory, run = (\n    [], 0)\ntime [\n    0] = 1\nenv: dict = {\n}\nsave if run else (\n    load)\n"
    source = Notebook(notebook_of(code), "nb.ipynb").source.decode()
    assert source == code


def test_a_cell_with_a_top_level_await_is_checked_and_fixed():
    # IPython runs a cell's top-level `await`, `async for` and `async with` in its event loop.
    setup, _, training = HOISTED.joinpath("before.py").read_text().partition("\nloss = ")
    awaiting = "import asyncio\nawait asyncio.sleep(0)\nasync with asyncio.Lock():\n    pass\n"
    original = notebook_of(setup + awaiting, "loss = " + training)
    report = check_source(original, all_rules(), FixMode.SAFE, "train.ipynb")
    assert not report.errors
    assert [(f.code, f.cell, f.line) for f in report.fixed] == [("GF003", 3, 1)]
    cells = json.loads(report.rewritten)["cells"]
    assert "".join(cells[1]["source"]) == setup + awaiting
    assert "".join(cells[2]["source"]) == HOISTED.joinpath("after.py").read_text().removeprefix(setup + "\n")


def test_the_cells_are_one_module_in_cell_order():
    # A helper defined in cell 3 is read where cell 9 calls it: it backwards the loss, which the
    # loop then backwards again.
    helper = "def backward_and_step(loss):\n    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
    training = "for step in range(3):\n    loss = (model(x) - y).pow(2).mean()\n    backward_and_step(loss)\n    loss.backward()\n"
    setup = "import torch\nmodel = torch.nn.Linear(3, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    cells = [setup, helper, "x = torch.randn(4, 3)", "%matplotlib inline", "print(x.shape)", "y = torch.randn(4, 1)", "import math", training]
    report = check_source(notebook_of(*cells), all_rules(), path="train.ipynb")
    assert [(f.code, f.cell, f.line) for f in report.findings] == [("GF001", 9, 4)]
    assert "first at cell 9, line 3" in report.findings[0].message
    without_the_helper = notebook_of(*cells[:1], "def backward_and_step(loss):\n    pass\n", *cells[2:])
    assert check_source(without_the_helper, all_rules(), path="train.ipynb").findings == []


def test_a_fix_writes_every_magic_line_back_byte_for_byte_and_nothing_else():
    # The forward the fix moves into the loop has magics above it: they stay where they were, as
    # the user wrote them, and the loop does not start to run them.
    setup, _, training = COMMENTED.joinpath("before.py").read_text().partition("# forward pass\n")
    magics = "%time z = 1\nfiles = !ls\ntorch.nn.Linear?\ncd data\n!pip install --quiet \\\n    torch\n"
    loop_magic = "    !echo epoch\n"
    training = "# forward pass\n" + training.replace("# odd spacing\n", "# odd spacing\n" + loop_magic)
    first = "%%time\n" + setup
    original = notebook_of(first, magics + training)
    report = check_source(original, all_rules(), FixMode.SAFE, "train.ipynb")
    assert [f.code for f in report.fixed] == ["GF003"] and not report.findings and not report.errors
    fixed = magics + COMMENTED.joinpath("after.py").read_text().removeprefix(setup).replace("# odd spacing\n", "# odd spacing\n" + loop_magic)
    assert report.rewritten == notebook_of(first, fixed)


def test_a_cell_is_split_into_lines_where_python_splits_it():
    # Python ends a line at "\n", "\r\n" or "\r"; str.splitlines also ends one at "\f" or "\u2028".
    setup, _, training = HOISTED.joinpath("before.py").read_text().partition("\nloss = ")
    odd = 'label = "a\fb\u2028c"\n\f\n!echo a\fb\nx = 1\ry = 2\r\n'
    original = notebook_of(setup + odd, "loss = " + training)
    notebook = Notebook(original, "train.ipynb")
    assert f"\n{odd.replace('!echo', 'pass  # gradfix-magic: !echo')}" in notebook.source.decode()
    assert notebook.with_source(notebook.source) == original
    report = check_source(original, all_rules(), FixMode.SAFE, "train.ipynb")
    assert [(f.code, f.cell, f.line) for f in report.fixed] == [("GF003", 3, 1)] and not report.errors
    assert json.loads(report.rewritten)["cells"][1] == json.loads(original)["cells"][1]
