"""A tensor handed to a function of the file that detaches that parameter in place on every path
(``def detach_(h): h.detach_()``) holds no graph after the call: h86's generator found GF004 reporting
(with a safe fix adding a needless detach) a recurrent state the loop detaches that way. A helper
that detaches only under a test, or rebinds its own name to a detached copy (which the caller never
sees), leaves the caller's state with its graph: that program fails, and is reported."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn.functional as F
from torch import nn


def detach_(h, always=True):
    HELPER


torch.manual_seed(0)
cell = nn.GRUCell(6, 8)
head = nn.Linear(8, 1)
opt = torch.optim.SGD(list(cell.parameters()) + list(head.parameters()), lr=0.05)
h = torch.zeros(8, 8)
for i in range(4):
    x, y = torch.randn(8, 6), torch.randn(8, 1)
    detach_(h, always=i > 8)
    opt.zero_grad()
    h = cell(x, h)
    loss = F.mse_loss(head(h), y)
    loss.backward()
    opt.step()
"""


def test_a_state_a_helper_detaches_in_place_holds_no_graph(runs, tmp_path):
    source = PROGRAM.replace("HELPER", "h.detach_()")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF004", "GF010", hints=False) == []


@pytest.mark.parametrize("helper", ["if always:\n        h.detach_()", "h = h.detach()\n    return h"])
def test_a_helper_that_may_leave_the_callers_tensor_keeps_its_graph(helper, runs, tmp_path):
    source = PROGRAM.replace("HELPER", helper)
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert findings_of(source, "GF004", "GF010", hints=False) != []
