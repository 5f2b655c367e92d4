"""Hints: a finding that rests on what gradfix could only guess ("may", not "must") is not in the
default output, never carries a fix, and is shown on request (``--hints``, ``hints = true``,
``hints=True``), in every output. Which facts make a finding a hint: test_unknowns.py (the entries
of UNKNOWNS.md's "What a finding needs") and test_must_facts.py."""

import json
import textwrap

import pytest
from typer.testing import CliRunner

import gradfix
from gradfix.cli.app import app

# A loop that keeps each step's value of `evaluate` in a list: a graph kept alive when `evaluate`
# returns the loss with its graph; nothing when it returns a number.
KEPT = """\
import torch
import torch.nn as nn
{helper}
model = nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
history = []
for step in range(3):
    x = torch.randn(4, 3)
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    kept = evaluate(model, x)
    history.append(kept)
"""
READ_HELPER = """
def evaluate(model, x):
    return model(x).abs().mean()
"""
UNREAD_HELPER = "from metrics import evaluate\n"


def program(helper):
    return KEPT.format(helper=helper)


def codes(findings):
    return [(f.code, f.hint) for f in findings]


def test_a_value_kept_from_code_gradfix_read_is_a_finding():
    assert codes(gradfix.check(program(READ_HELPER)).findings) == [("GF007", False)]


def test_the_same_value_from_code_gradfix_did_not_read_is_a_hint_without_a_fix():
    source = program(UNREAD_HELPER)
    assert gradfix.check(source).findings == ()
    (hint,) = gradfix.check(source, hints=True).findings
    assert (hint.code, hint.hint, hint.fix) == ("GF007", True, None)
    assert "hint: `kept` may hold no graph" in hint.message
    assert gradfix.fix(source, unsafe_fixes=True, hints=True).source == source


def test_time_is_a_number_library():
    source = program(READ_HELPER).replace("    kept = evaluate(model, x)\n", "    kept = time.time() - start\n")
    source = "import time\nstart = time.time()\n" + source
    assert gradfix.check(source, hints=True).findings == ()


# Lightning's parity tests: the batches come from a loader an unread class's method builds.
STEPPED_BY_NEXT = """\
import torch
from models import ConvNet
model = ConvNet()
loader = model.get_dataloader()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
{batches}
for _ in range(3):
    {batch}
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(inputs), labels)
    loss.backward()
    optimizer.step()
"""


def test_a_step_of_an_iterator_yields_what_a_loop_over_it_yields():
    """``next(iter(loader))`` is one step of the loop ``for batch in loader``: an iterable gradfix
    knows nothing of (a loader built by code it did not read) yields data either way, and a list
    of graphs yields one of them either way."""
    by_loop = STEPPED_BY_NEXT.format(batches="", batch="pass").replace("for _ in range(3):", "for inputs, labels in loader:")
    by_next = STEPPED_BY_NEXT.format(batches="batches = iter(loader)", batch="inputs, labels = next(batches)")
    assert codes(gradfix.check(by_loop, hints=True).findings) == []
    assert codes(gradfix.check(by_next, hints=True).findings) == []
    listed = "import torch\nnet = torch.nn.Linear(2, 1)\nlosses = [net(torch.randn(1, 2)).sum() for _ in range(2)]\nfirst = next(iter(losses))\nfirst.backward()\nfirst.backward()\n"
    assert codes(gradfix.check(listed, hints=True).findings) == [("GF001", False)]


@pytest.fixture
def project(tmp_path):
    (tmp_path / "train.py").write_text(program(UNREAD_HELPER))
    return tmp_path


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_the_command_line_counts_hints_and_shows_them_when_asked(project):
    hidden = run("check", "--no-cache", project / "train.py")
    assert hidden.exit_code == 0 and "GF007" not in hidden.stdout
    assert "1 hint(s) not shown (`--hints` shows them)" in hidden.stderr
    shown = run("check", "--no-cache", "--hints", project / "train.py")
    assert shown.exit_code == 1 and "GF007" in shown.stdout and shown.stdout.rstrip().endswith("[hint]")
    (record,) = json.loads(run("check", "--no-cache", "--hints", "--output-format", "json", project / "train.py").stdout)
    assert record["hint"] is True and record["fix"] is None
    sarif = json.loads(run("check", "--no-cache", "--hints", "--output-format", "sarif", project / "train.py").stdout)
    assert [result["level"] for result in sarif["runs"][0]["results"]] == ["note"]
    annotation = run("check", "--no-cache", "--hints", "--output-format", "github", project / "train.py").stdout
    assert annotation.startswith("::notice ")


def test_the_setting_shows_hints_and_the_option_overrides_it(project):
    (project / "pyproject.toml").write_text(
        textwrap.dedent("""\
        [tool.gradfix]
        hints = true
        """)
    )
    assert "GF007" in run("check", "--no-cache", project / "train.py").stdout
    assert "GF007" not in run("check", "--no-cache", "--no-hints", project / "train.py").stdout
    (project / "pyproject.toml").write_text('[tool.gradfix]\nhints = "yes"\n')
    refused = run("check", "--no-cache", project / "train.py")
    assert refused.exit_code == 2 and "hints must be true or false" in refused.stderr


def test_stdin_hides_hints_as_files_do(project):
    result = CliRunner().invoke(app, ["check", "-", "--stdin-filename", "train.py"], input=program(UNREAD_HELPER))
    assert result.exit_code == 0 and "1 hint(s) not shown" in result.stderr


# (a forward built once before the loop by a model handed in: EmilienDupont/augmented-neural-odes' trainer, reduced)
FORWARD_BEFORE_THE_LOOP = """\
import torch.nn as nn
def fit(model, optimizer, x, y, steps):
    pred = model(x)
    for step in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(pred, y)
        loss.backward({retained})
        optimizer.step()
"""


def test_a_hint_says_why_the_program_may_run_as_it_is():
    """A forward computed once before the loop runs every iteration where the graph is kept, or
    where the model gradfix cannot read may save nothing the backward frees: the message says
    which, and never that the graph is kept when no call keeps it (with a layer there, the second
    iteration raises)."""
    kept, freed = (gradfix.check(FORWARD_BEFORE_THE_LOOP.format(retained=retained), hints=True).findings for retained in ("retain_graph=True", ""))
    assert [(f.code, f.hint) for f in kept + freed] == [("GF003", True), ("GF003", True)]
    assert "the graph is kept, so the program runs" in kept[0].message
    assert "the graph is kept" not in freed[0].message
    assert "not proved to save a tensor the backward frees, so the program may run" in freed[0].message


RUNNING_LOSS_RESET = """\
import torch
from torch import nn
model = nn.Linear(4, 10)
optimizer = torch.optim.Adam(model.parameters())
running_loss = 0
for i in range(250):
    optimizer.zero_grad()
    loss = model(torch.randn(8, 4)).pow(2).mean()
    running_loss += loss
    loss.backward()
    optimizer.step()
{reset}
"""


def test_a_total_reset_under_a_condition_keeps_the_graphs_of_the_steps_between():
    # yjwu17/STBP-for-training-SpikingNN (h79, mutated; the PyTorch CIFAR tutorial's shape with a tensor):
    # up to 100 steps' graphs are linked in `running_loss` between two prints.
    periodic = "    if (i + 1) % 100 == 0:\n        print(running_loss)\n        running_loss = 0"
    [finding] = gradfix.check(RUNNING_LOSS_RESET.format(reset=periodic), hints=True).findings
    assert (finding.code, finding.hint, finding.fix) == ("GF007", True, None)
    assert "is made anew under a condition (line 14)" in finding.message
    assert gradfix.check(RUNNING_LOSS_RESET.format(reset=periodic)).findings == ()  # (a hint: not in the default output)
    # Hidden facts: made anew in every iteration, it keeps one step's graph; never made anew, every step's.
    assert gradfix.check(RUNNING_LOSS_RESET.format(reset="    print(running_loss)\n    running_loss = 0"), hints=True).findings == ()
    [finding] = gradfix.check(RUNNING_LOSS_RESET.format(reset=""), hints=True).findings
    assert (finding.code, finding.hint) == ("GF007", False)
