"""A call of the file's function or method that stores part of its graph on an object (``self.aux = ...`` in a
forward, ``self.last = pred`` in a trainer's method, a list on ``self``) hands that graph to whatever reads the
attribute later: a backward of it walks the graph again, and the ``retain_graph=True`` before it is needed
(h83's generator). Stored detached, nothing of the graph is kept, and the drop is safe."""

import subprocess
import sys

import pytest

from gradfix.codemods.check import check_file
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .retain_graph_drops import fixed_safely, runs_with_it_dropped

IN_A_FORWARD = """\
import torch
import torch.nn as nn

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(4, 6)
        self.head = nn.Linear(6, 1)
        self.aux = None

    def forward(self, x):
        z = torch.tanh(self.trunk(x))
        self.aux = KEPT
        return self.head(z)


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    optimizer.zero_grad()
    loss = model(torch.randn(4, 4)).pow(2).mean()
    loss.backward(retain_graph=True)
    AFTER
    optimizer.step()
"""
IN_A_METHOD = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Trainer:
    def __init__(self, model):
        self.model, self.last = model, None

    def compute(self, x, y):
        pred = self.model(x)
        self.last = KEPT
        return F.mse_loss(pred, y)


model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1))
trainer = Trainer(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(4, 4), torch.randn(4, 1)
for step in range(3):
    optimizer.zero_grad()
    loss = trainer.compute(x, y)
    loss.backward(retain_graph=True)
    AFTER
    optimizer.step()
"""
CASES = [
    (IN_A_FORWARD, "z.pow(2).mean()", "model.aux.backward()", "print(model.aux)"),
    (IN_A_METHOD, "pred", "(0.1 * trainer.last.pow(2).mean()).backward()", "print(trainer.last)"),
]


@pytest.mark.parametrize(("program", "kept", "backwarded", "read"), CASES, ids=["forward", "method"])
def test_a_graph_kept_on_an_object_and_backwarded_later_needs_its_retain_graph(program, kept, backwarded, read):
    source = program.replace("KEPT", kept).replace("AFTER", backwarded)
    assert not runs_with_it_dropped(source, "loss.backward(retain_graph=True)")
    assert not fixed_safely(source)


@pytest.mark.parametrize(("program", "kept", "backwarded", "read"), CASES, ids=["forward", "method"])
def test_the_variant_that_keeps_it_detached_drops_retain_graph_safely(program, kept, backwarded, read):
    source = program.replace("KEPT", f"({kept}).detach()").replace("AFTER", read)
    assert runs_with_it_dropped(source, "loss.backward(retain_graph=True)")
    assert fixed_safely(source)


def test_the_variant_whose_method_is_in_a_module_gradfix_reads_only_by_summary_drops_nothing(tmp_path):
    """The trainer imported from another file: its summary does not say what it keeps on the object, so what
    the walk reads of ``trainer.last`` is unknown, and the drop is not made."""
    (tmp_path / ".git").mkdir()
    trainer = IN_A_METHOD.split("\n\n\nmodel = ")[0].replace("import torch\nimport torch.nn as nn\n", "").replace("torch.manual_seed(0)\n", "")
    (tmp_path / "trainer.py").write_text(trainer.replace("KEPT", "pred"))
    training = "import torch\nimport torch.nn as nn\nfrom trainer import Trainer\n\nmodel = " + IN_A_METHOD.split("\n\n\nmodel = ")[1]
    (tmp_path / "train.py").write_text(training.replace("AFTER", "(0.1 * trainer.last.pow(2).mean()).backward()"))
    done = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True, timeout=300)
    assert done.returncode == 0
    assert check_file(tmp_path / "train.py", all_rules(), FixMode.SAFE).fixed == []
