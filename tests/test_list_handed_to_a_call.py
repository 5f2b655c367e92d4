"""A list whose losses a backward freed, handed to a call that may change it (a helper of the file that
backwards what it holds, then ``losses.clear()``), only may hold those losses after the call: GF010
reported h83's program, which runs, as walking freed graphs again. A helper whose body only reads the
list (stacks it, counts it) leaves it as it was: the freed losses are there for the next backward,
which fails, and that is reported."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def flush(losses, optimizer):
    optimizer.zero_grad()
    torch.stack(losses).mean().backward()
    optimizer.step()
    AFTER


X, Y = torch.randn(16, 4), torch.randn(16, 1)
model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
losses = []
for x, y in zip(X.split(4), Y.split(4)):
    losses.append(F.mse_loss(model(x), y))
    if len(losses) % 2 == 0:
        flush(losses, optimizer)
"""
SECOND_BACKWARD = "backward through the graph a second time"


@pytest.mark.parametrize(
    "after",
    ["losses.clear()", "del losses[:]", "losses[:] = []", "forget(losses)\n\n\ndef forget(items):\n    items.clear()"],
    ids=["clear", "del", "slice", "through-another-helper"],
)
def test_a_list_a_helper_may_empty_only_may_hold_the_freed_losses(after, runs, tmp_path):
    source = PROGRAM.replace("AFTER", after)
    assert run_error(runs, tmp_path, source) == ""
    assert all(f.hint for f in findings_of(source, "GF010"))


@pytest.mark.parametrize("after", ["print(len(losses))", "print(losses[0])", "print([loss.item() for loss in losses])"])
def test_a_list_a_helper_only_reads_still_holds_them(after, runs, tmp_path):
    source = PROGRAM.replace("AFTER", after)
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF010")
    assert len(found) == 1 and not found[0].hint
