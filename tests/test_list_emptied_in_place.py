"""``xs.clear()`` empties a list in place: what it held is no longer carried into the next iteration
(h80's generator: gradient accumulation over two batches, `pending.clear()` after their backward).
So does ``xs[:] = []``. Without either, or where what is emptied is a copy or a part, the graphs it keeps are
the next backward's."""

import subprocess
import sys

import pytest

import gradfix

PROGRAM = """\
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
xs = torch.randn(4, 5, 4)
PENDING
for i in range(4):
    pending.append(model(xs[i]).sum())
    if i % 2 == 1:
        opt.zero_grad()
        torch.stack(pending).sum().backward()
        opt.step()
        CLEAR
"""
LIST = "pending = []"


def _gf004(source: str) -> list[bool]:
    """Whether each GF004 finding is a hint."""
    return [f.hint for f in gradfix.check(source, hints=True).findings if f.code == "GF004"]


def _runs(source: str) -> bool:
    return subprocess.run([sys.executable, "-c", source], capture_output=True, timeout=300).returncode == 0


@pytest.mark.parametrize("clear", ["pending.clear()", "pending[:] = []"])
def test_a_list_emptied_after_its_backward_carries_nothing(clear):
    source = PROGRAM.replace("PENDING", LIST).replace("CLEAR", clear)
    assert _runs(source)
    assert _gf004(source) == []


@pytest.mark.parametrize("clear", ["pass", "pending.copy().clear()", "pending[:1] = []"], ids=["no-clear", "a-copy-emptied", "a-part-emptied"])
def test_the_variants_carry_the_freed_graphs(clear):
    source = PROGRAM.replace("PENDING", LIST).replace("CLEAR", clear)
    assert not _runs(source)
    assert len(_gf004(source)) == 1
