"""``tracker.backward(loss)`` on an instance of the file's own class runs the method the file defines:
h86's generator gave a bookkeeping class a ``backward`` that records a float, and gradfix read each
call as a backward of its argument: GF002 merged two of them as a safe fix (the fixed program
recorded half the values), GF001 reported ``loss.backward()`` as a second backward. The method is
read: its summary says what it backwards. Where it does backward its argument, the program fails,
and that is reported; where the class is another module's that gradfix did not read, which tensor
the call backwards is a guess, and so is every finding that rests on it (a hint)."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

PROGRAM = """\
import torch
import torch.nn.functional as F
from torch import nn
TRACKER

torch.manual_seed(0)
model = nn.Linear(6, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
tracker = Tracker()
for i in range(3):
    x, y = torch.randn(8, 6), torch.randn(8, 1)
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    tracker.backward(loss)
    tracker.backward(loss * 2)
    loss.backward()
    opt.step()
print(len(tracker.values))
"""
RECORDING = """

class Tracker:
    def __init__(self):
        self.values = []

    def backward(self, value):
        self.values.append(round(float(value), 4))
"""
BACKWARDING = RECORDING.replace("self.values.append(round(float(value), 4))", "self.values.append(1)\n        value.backward()")


def _report(source: str):
    return check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")


def _findings(source: str) -> list:
    report = _report(source)
    return [f for f in (*report.findings, *report.fixed) if f.code in ("GF001", "GF002")]


def _run(runs, tmp_path, source: str):
    script = tmp_path / "train.py"
    script.write_text(source)
    return runs.run(script)


def test_a_method_of_the_files_class_that_backwards_nothing_is_no_backward(runs, tmp_path):
    source = PROGRAM.replace("TRACKER", RECORDING)
    result = _run(runs, tmp_path, source)
    assert result.status == "ok" and result.stdout.split() == ["6"]
    assert _findings(source) == [] and _report(source).rewritten is None


def test_a_method_of_the_files_class_that_backwards_its_argument_is_one(runs, tmp_path):
    source = PROGRAM.replace("TRACKER", BACKWARDING)
    assert "backward through the graph a second time" in _run(runs, tmp_path, source).error_message
    assert any(not f.hint for f in _findings(source))


def test_a_method_of_a_class_gradfix_did_not_read_is_a_guess():
    found = _findings(PROGRAM.replace("TRACKER", "from tracking import Tracker"))
    assert found and all(f.hint for f in found)
    assert _report(PROGRAM.replace("TRACKER", "from tracking import Tracker")).rewritten is None


@pytest.mark.parametrize("helper_steps", [True, False])
def test_gf008_moves_no_call_that_may_also_step(helper_steps):
    """h86's generator: a helper of the file backwards the loss and steps; GF008's unsafe fix moved
    it into the batch loop, which then stepped at every batch (a fix never moves an optimizer
    update). A helper that only backwards is moved as before."""
    step = "\n    opt.step()" if helper_steps else ""
    source = (
        "import torch\nimport torch.nn.functional as F\n\n\ndef backward_step(loss, opt):\n    loss.backward()" + step + "\n\n\n"
        "model = torch.nn.Linear(6, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.05)\nbatches = [(torch.randn(8, 6), torch.randn(8, 1))] * 4\n"
        "for epoch in range(2):\n    opt.zero_grad()\n    for x, y in batches:\n        loss = F.mse_loss(model(x), y)\n"
        "    backward_step(loss, opt)\n" + ("" if helper_steps else "    opt.step()\n")
    )
    report = check_source(source.encode(), all_rules(), FixMode.UNSAFE, "train.py")
    (found,) = [f for f in (*report.findings, *report.fixed) if f.code == "GF008"]
    assert (found in report.fixed) is not helper_steps
    assert ("may also update parameters" in found.message) is helper_steps
