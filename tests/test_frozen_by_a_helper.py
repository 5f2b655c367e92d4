"""A module handed to a function of the file that freezes the parameter it arrives as (``def
freeze(net): for p in net.parameters(): p.requires_grad_(False)``) is frozen, as one frozen where it
is: h86's generator found GF006 reporting a teacher's target, built once by that frozen teacher, as
keeping a graph every step backwards into (with a safe fix adding a needless ``.detach()``). A
helper that turns the parameters on again leaves the module maybe trained; one that freezes
nothing leaves it trained, and the target built once keeps its graph: that program fails."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn.functional as F
from torch import nn


def freeze(net):
    for p in net.parameters():
        p.requires_grad_(FLAG)
    return net


torch.manual_seed(0)
student = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
teacher = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(student.parameters(), lr=0.05)
x = torch.randn(8, 6)
freeze(teacher)
target = teacher(x)
for it in range(4):
    opt.zero_grad()
    loss = F.mse_loss(student(x), target)
    loss.backward()
    opt.step()
"""


def test_a_module_a_helper_freezes_builds_no_graph(runs, tmp_path):
    source = PROGRAM.replace("FLAG", "False")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF003", "GF006", hints=False) == []


@pytest.mark.parametrize("flag", ["True", "p.dim() > 1"])
def test_a_module_a_helper_may_leave_trained_keeps_its_graph(flag, runs, tmp_path):
    source = PROGRAM.replace("FLAG", flag)
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert findings_of(source, "GF003", "GF006", hints=False) != []


def test_a_module_a_helper_freezes_only_under_a_test_may_be_trained(runs, tmp_path):
    """The helper's call runs only under a test gradfix does not evaluate: the module may be trained,
    and the run without the flag keeps the target's graph and fails; a hint at most."""
    source = (
        PROGRAM.replace("FLAG", "False")
        .replace("freeze(teacher)", "if FREEZE:\n    freeze(teacher)")
        .replace("x = torch.randn(8, 6)", "x = torch.randn(8, 6)\nFREEZE = False")
    )
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert findings_of(source, "GF003", "GF006", hints=False) == []
    assert findings_of(source, "GF003", "GF006") != []
