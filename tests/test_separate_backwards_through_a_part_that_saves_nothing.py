"""Two losses that share only a part of the graph that saved no tensor (a concatenation, a sum, a
slice of parameters) can be backwarded one after the other: the first backward frees nothing the
second needs, and the gradients are those of their sum (with an optimizer step between them, two
updates, as written). GF002 reported them as if the second backward failed (h89's generator,
families ``nosave_trunk_*``: 41 false findings). Where what they share certainly saved nothing,
there is no finding; where it may have saved a tensor (a product, a layer), the finding stays."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
base = nn.Parameter(torch.randn(4))
shift = nn.Parameter(torch.randn(8))
t1, t2 = torch.randn(8), torch.randn(8)
opt = torch.optim.SGD([base, shift], lr=0.1)
for step in range(3):
    opt.zero_grad()
    shared = SHARED
    loss_a = ((shared - t1) ** 2).mean()
    loss_b = (shared * t2).tanh().sum()
    loss_a.backward()
    BETWEEN
    loss_b.backward()
    opt.step()
"""
SECOND_BACKWARD = "backward through the graph a second time"


@pytest.mark.parametrize("between", ["pass", "opt.step()\n    opt.zero_grad()"], ids=["nothing-between", "a-step-between"])
@pytest.mark.parametrize("shared", ["torch.cat([base, base]) + shift", "shift[:4].repeat(2) - base.sum()"], ids=["cat-add", "slice-repeat"])
def test_losses_sharing_what_saved_nothing_are_not_reported(shared, between, runs, tmp_path):
    source = PROGRAM.replace("SHARED", shared).replace("BETWEEN", between)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF002") == []


@pytest.mark.parametrize("shared", ["torch.cat([base, base]) * shift", "torch.cat([base, base]).exp() + shift"], ids=["product", "exp"])
def test_losses_sharing_what_saved_a_tensor_are_reported(shared, runs, tmp_path):
    source = PROGRAM.replace("SHARED", shared).replace("BETWEEN", "pass")
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF002", hints=False)
    assert len(found) == 1 and "share the graph" in found[0].message
