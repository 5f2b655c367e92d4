"""A slice of a list (``history[-2:]``) holds some of its items: where a backward freed some of the
list's losses, the slice only may hold them. h86's generator: every other step a helper backwards
the mean of the last two losses of a growing history, each pair once, and GF010 reported a freed
graph walked again. The whole list (``history``, ``history[:]``) holds every item, freed ones too:
that program fails, and is reported."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn.functional as F
from torch import nn


def flush(opt, pending):
    opt.zero_grad()
    torch.stack(pending).mean().backward()
    opt.step()


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
history = []
for i in range(6):
    x, y = torch.randn(8, 6), torch.randn(8, 1)
    history.append(F.mse_loss(model(x), y))
    if len(history) % 2 == 0:
        flush(opt, PASSED)
"""


def test_a_slice_only_may_hold_the_freed_losses(runs, tmp_path):
    source = PROGRAM.replace("PASSED", "history[-2:]")
    assert run_error(runs, tmp_path, source) == ""
    assert all(f.hint for f in findings_of(source, "GF010"))


@pytest.mark.parametrize("passed", ["history", "history[:]"])
def test_the_whole_list_holds_them(passed, runs, tmp_path):
    source = PROGRAM.replace("PASSED", passed)
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF010")
    assert found and not any(f.hint for f in found)
