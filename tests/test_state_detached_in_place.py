"""A state the loop cuts in place (``hidden.detach_()``) or binds to its data (``hidden =
hidden.data``) where it cuts it is managed by its author, as ``hidden = hidden.detach()`` in the
same place is: k-step truncated backpropagation that backwards into the window with
``retain_graph=True`` and cuts the state after each optimizer step walks at most k steps, and runs.
GF004 read only an assignment of a ``.detach()`` as such a cut, and reported the in-place forms as
carrying every earlier iteration's graph (h89's generator, family ``tbptt_k``: 21 false findings).
The variant that never cuts the state fails, and is reported."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
cell = nn.RNNCell(3, 4)
opt = torch.optim.SGD(cell.parameters(), lr=0.1)
hidden = torch.zeros(2, 4)
xs, ys = torch.randn(6, 2, 3), torch.randn(6, 2, 4)
opt.zero_grad()
for t in range(6):
    hidden = cell(xs[t], hidden)
    loss = F.mse_loss(hidden, ys[t])
    loss.backward(retain_graph=True)
    if (t + 1) % 2 == 0:
        opt.step()
        opt.zero_grad()
        CUT
"""


@pytest.mark.parametrize("cut", ["hidden.detach_()", "hidden = hidden.data", "hidden = hidden.detach()"], ids=["detach_", "data", "detach"])
def test_a_state_cut_where_the_window_ends_is_not_reported(cut, runs, tmp_path):
    source = PROGRAM.replace("CUT", cut)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF004") == []


def test_a_state_never_cut_is_reported(runs, tmp_path):
    source = PROGRAM.replace("CUT", "pass")
    assert "modified by an inplace operation" in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF004", hints=False)
    assert len(found) == 1 and "carries the graph of every earlier iteration" in found[0].message
