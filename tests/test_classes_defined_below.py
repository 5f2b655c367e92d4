"""A class defined at the module's level below the function that uses it is what the function's
name means: Python looks the name up when the function runs, after the module has run down to
the class. The analysis knows the class in function bodies read above it (``classes_below``), as
it knows a class defined above, except where the name may mean something else when the body
runs: the name bound again, the class under an ``if`` or in a function, a module statement
above the class that runs the function (or uses the name itself: ``NameError``)."""

import subprocess
import sys
import textwrap

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

# Two losses of one forward backwarded one by one: the second backward raises (reduced by H70).
TWO_LOSSES = """\
import torch
from torch import nn


def main():
    torch.manual_seed(0)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        out = model(torch.randn(4, 8))
        loss_a = out.pow(2).mean()
        loss_b = out.abs().mean()
        opt.zero_grad()
        loss_a.backward()
        loss_b.backward()
        opt.step()
    print([round(v, 5) for p in model.parameters() for v in p.flatten().tolist()])

ABOVE
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(x)

BELOW
if __name__ == "__main__":
    main()
"""
CLASS = TWO_LOSSES[TWO_LOSSES.index("class Net") : TWO_LOSSES.index("BELOW")]
MEANT = ("loss_a.backward()", "loss_a.backward(retain_graph=True)")  # both gradients, as the author meant

# A meter of the file handed the loss tensor keeps every step's graph (reduced by H70 from
# microsoft/human-pose-estimation.pytorch lib/core/function.py).
METER = """\
import torch
from torch import nn


def train(train_loader, model, criterion, optimizer):
    losses = AverageMeter()
    model.train()
    for i, (input, target) in enumerate(train_loader):
        output = model(input)
        loss = criterion(output, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.update(loss, input.size(0))
    return losses

ABOVE
class AverageMeter(object):
    def __init__(self):
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n

BELOW
if __name__ == "__main__":
    model = nn.Linear(8, 2)
    loader = [(torch.randn(4, 8), torch.randn(4, 2)) for _ in range(5)]
    meter = train(loader, model, nn.MSELoss(), torch.optim.SGD(model.parameters(), lr=0.1))
    print("kept a graph:", meter.sum.requires_grad)
"""
METER_CLASS = METER[METER.index("class AverageMeter") : METER.index("BELOW")]


def _program(template: str, above: str = "", below: str = "") -> str:
    return template.replace("ABOVE\n", above).replace("BELOW\n", below)


def _moved_above(template: str, block: str) -> str:
    """The class above the function that uses it."""
    return _program(template.replace(block, ""), below="").replace("\ndef ", "\n" + block + "\ndef ", 1)


def _report(source: str):
    return check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")


def _runs(source: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=300)


def _fixed_gf002(source: str) -> str | None:
    report = _report(source)
    if [f.code for f in report.fixed] != ["GF002"] or report.rewritten is None:
        return None
    return report.rewritten.decode()


def _gf007(source: str) -> bool:
    return any(f.code == "GF007" for f in _report(source).findings)


def _trains_as_meant(source: str) -> None:
    """The program raises; its GF002 fix runs and trains as the program that keeps the graph for
    the second backward (the author's meaning) does."""
    assert "backward through the graph a second time" in _runs(source).stderr
    fixed = _fixed_gf002(source)
    assert fixed is not None
    ran, meant = _runs(fixed), _runs(source.replace(*MEANT))
    assert ran.returncode == 0 and meant.returncode == 0, ran.stderr + meant.stderr
    assert ran.stdout == meant.stdout


def test_a_model_class_below_main_gets_the_safe_fix_a_class_above_gets():
    _trains_as_meant(_moved_above(TWO_LOSSES, CLASS))  # (the class above: the reference)
    _trains_as_meant(_program(TWO_LOSSES))


def test_a_meter_class_below_train_keeps_the_graph_found_as_above():
    for source in (_program(METER), _moved_above(METER, METER_CLASS)):
        assert _runs(source).stdout.strip() == "kept a graph: True"
        assert _gf007(source)


def _in_function(block: str) -> str:
    """``block``, a module-level class, defined by a function that makes its name global."""
    name = block.split()[1].split("(")[0]
    indented = "".join(f"    {line}" if line.strip() else line for line in block.splitlines(keepends=True))
    return f"def define():\n    global {name}\n{indented}\n\ndefine()\n"


def _under_if(block: str) -> str:
    indented = "".join(f"    {line}" if line.strip() else line for line in block.splitlines(keepends=True))
    return f"if torch.__version__:\n{indented}"


# The module's own code uses the name above the class: it raises ``NameError`` there, and
# ``main`` never runs.
MODULE_LEVEL = textwrap.dedent(TWO_LOSSES[TWO_LOSSES.index("    model = Net()") : TWO_LOSSES.index("    print(")]) + "\n\n"  # ``main``'s loop


# The name bound again below the class, to a function that builds another object.
REBOUND = {
    "Net": "\n\ndef make():\n    return nn.Sequential(nn.Linear(8, 2), nn.Tanh())\n\n\nNet = make\n\n\n",
    "AverageMeter": (
        "\n\nclass Kept(object):\n    def __init__(self):\n        self.sum = 0\n\n    def update(self, val, n=1):\n        self.sum += val * n\n"
        "\n\ndef make():\n    return Kept()\n\n\nAverageMeter = make\n\n\n"
    ),
}


# Each variant hides one fact: the program, from its template and the class's block.
VARIANTS = {
    # bound again after its definition: the function's call builds what ``make`` returns
    "bound_again": lambda t, b: _program(t, below=REBOUND[b.split()[1].split("(")[0]]),
    "under_an_if": lambda t, b: _program(t.replace(b, _under_if(b))),
    "inside_a_function": lambda t, b: _program(t.replace(b, _in_function(b))),
    # the module's code runs the function above the class: ``NameError``
    "function_run_above": lambda t, b: _program(t).replace("\n" + b, "\nmain()\n\n\n" + b),
    "used_above_at_module_level": lambda t, b: _program(t, above=MODULE_LEVEL),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_variant_that_hides_one_fact_gets_no_safe_gf002_fix(variant):
    """The class below ``main``, fixed; the same program with one fact hidden, not."""
    assert _fixed_gf002(_program(TWO_LOSSES)) is not None
    source = VARIANTS[variant](TWO_LOSSES, CLASS)
    assert _fixed_gf002(source) is None
    error = "NameError" if variant in ("function_run_above", "used_above_at_module_level") else "backward through the graph a second time"
    assert error in _runs(source).stderr


@pytest.mark.parametrize("variant", sorted(set(VARIANTS) - {"function_run_above", "used_above_at_module_level"}))
def test_a_variant_that_hides_one_fact_loses_the_meter_finding(variant):
    assert _gf007(_program(METER))
    source = VARIANTS[variant](METER, METER_CLASS)
    assert not _gf007(source)
    assert _runs(source).stdout.strip() == "kept a graph: True"


# A class derived from the class above its definition (``NameError`` when the module runs it),
# after a function whose body is read with the class known: the derived class is not read as a
# module of that base, so the function below it that builds one gets no fix.
DERIVED_ABOVE = """\
class Wide(Net):
    pass


def other():
    model = Wide()
    out = model(torch.randn(4, 8))
    loss_a = out.pow(2).mean()
    loss_b = out.abs().mean()
    loss_a.backward()
    loss_b.backward()


"""


def test_a_class_statement_above_the_class_does_not_derive_from_it():
    """``main`` calls ``Net`` (known), ``other`` calls ``Wide`` (not read as a module: a hint)."""
    source = _program(TWO_LOSSES, above=DERIVED_ABOVE)
    assert "NameError" in _runs(source).stderr
    report = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py")
    lines = source.splitlines()
    main_line = lines.index("        loss_a.backward()") + 1
    other_line = lines.index("    loss_a.backward()") + 1
    assert {(f.line, f.hint) for f in report.findings if f.code == "GF002"} == {(main_line, False), (other_line, True)}
