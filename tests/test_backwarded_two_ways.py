"""A loss backwarded by a framework and then by the tensor itself (``accelerator.backward(loss)``
then ``loss.backward()``, h95's review): GF001 finds it and does not rewrite it, since which of the
two ways (scaled and synchronised, or plain) is meant is not clear; its message now says so, where
it said nothing. Two calls of one way are fixed as before."""

from gradfix.codemods.report import FixMode

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn
from accelerate import Accelerator

accelerator = Accelerator(cpu=True)
model = nn.Linear(4, 1)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for it in range(2):
    loss = nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1))
    accelerator.backward(loss)
    SECOND
    optimizer.step()
    optimizer.zero_grad()
"""


def test_a_loss_backwarded_two_ways_is_found_and_says_why_it_is_not_rewritten(runs, tmp_path):
    source = PROGRAM.replace("SECOND", "loss.backward()")
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    [finding] = findings_of(source, "GF001", mode=FixMode.UNSAFE)
    assert not finding.hint and "not rewritten: backwarded two ways" in finding.message


def test_a_loss_backwarded_twice_one_way_is_fixed():
    [finding] = findings_of(PROGRAM.replace("SECOND", "accelerator.backward(loss)"), "GF001", mode=FixMode.SAFE)
    assert "two ways" not in finding.message
