"""A view of a parameter made once before the training loop (``w_t = lin.weight.t()``,
``.view(...)``, a slice) shares the parameter's storage: every update the optimizer makes in place
shows through it, and a view saves no tensor, so each step's backward through it runs. Nothing is
stale, and moving it into the loop changes nothing; GF003 reported it (h89's generator, family
``view_before_loop``: 32 false findings). The variant that copies (``.t().contiguous()``) keeps the
first step's weights: it trains on stale values, prints other losses than the view does, and is
reported."""

import pytest

from .one_program import findings_of

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
lin = nn.Linear(4, 2)
x, y = torch.randn(16, 4), torch.randn(16)
w_t = MADE
opt = torch.optim.SGD(lin.parameters(), lr=0.1)
for step in range(4):
    loss = F.mse_loss((x @ w_t).sum(1), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, round(loss.item(), 6))
"""
IN_THE_LOOP = PROGRAM.replace("w_t = MADE\n", "").replace("    loss = F.mse_loss", "    w_t = lin.weight.t()\n    loss = F.mse_loss")


def _printed(runs, tmp_path, source: str) -> str:
    script = tmp_path / "train.py"
    script.write_text(source)
    result = runs.run(script)
    assert result.status == "ok"
    return result.stdout


@pytest.mark.parametrize("made", ["lin.weight.t()", "lin.weight.view(2, 4).t()", "lin.weight[0:2].transpose(0, 1)"], ids=["t", "view-t", "slice"])
def test_a_view_of_a_parameter_made_before_the_loop_is_not_reported(made, runs, tmp_path):
    source = PROGRAM.replace("MADE", made)
    assert _printed(runs, tmp_path, source) == _printed(runs, tmp_path, IN_THE_LOOP)
    assert findings_of(source, "GF003") == []


def test_a_copy_made_before_the_loop_is_stale_and_reported(runs, tmp_path):
    source = PROGRAM.replace("MADE", "lin.weight.t().contiguous()")
    assert _printed(runs, tmp_path, source) != _printed(runs, tmp_path, IN_THE_LOOP)
    found = findings_of(source, "GF003", hints=False)
    assert len(found) == 1 and "computed once before the loop" in found[0].message
