"""What ``losses.append(loss)`` stores is what ``losses[-1]`` reads next, until the list changes again: a
step that backwards the loss it just appended walks its own graph only, however many earlier losses the
list keeps. Where the list may be held elsewhere (an alias, an object it was handed to), code gradfix
does not follow may append to it in between, and which item ``[-1]`` picks is not known."""

import subprocess
import sys

import pytest

import gradfix

# H80's generator (each step backwards the loss it appended, and a learning-rate rule reads the
# history), with `BACKWARDED` and what else holds the list (`HELD`) varied.
PROGRAM = """\
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Linear(5, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
xs = torch.randn(4, 7, 5)


class Plateau:
    def __init__(self, hist):
        self.hist = hist

    def factor(self):
        return 0.5 if len(self.hist) > 1 and self.hist[-1] > self.hist[-2] else 1.0


losses = []
HELD
for i in range(4):
    opt.zero_grad()
    losses.append(model(xs[i]).pow(2).mean())
    BACKWARDED.backward()
    for g in opt.param_groups:
        g["lr"] *= FACTOR
    opt.step()
print(model.weight)
"""
ALONE = {"HELD": "", "FACTOR": "1.0"}
KEPT_BY_AN_OBJECT = {"HELD": "plateau = Plateau(losses)", "FACTOR": "plateau.factor()"}


def _program(backwarded: str, held: dict[str, str]) -> str:
    source = PROGRAM.replace("BACKWARDED", backwarded)
    for key, text in held.items():
        source = source.replace(key, text)
    return source


def _runs(source: str) -> bool:
    return subprocess.run([sys.executable, "-c", source], capture_output=True, timeout=300).returncode == 0


def _gf004(source: str) -> list[str]:
    """How GF004's findings (in the default output) are fixed."""
    return [f.fix.value for f in gradfix.check(source, hints=True).findings if f.code == "GF004" and not f.hint and f.fix is not None]


@pytest.mark.parametrize("held", [ALONE, KEPT_BY_AN_OBJECT], ids=["alone", "kept-by-an-object"])
def test_the_loss_just_appended_is_backwarded_alone(held):
    source = _program("losses[-1]", held)
    assert _runs(source)
    assert _gf004(source) == ([] if held is ALONE else ["unsafe"])  # (held elsewhere: `[-1]` may be any item)


@pytest.mark.parametrize("held", [ALONE, KEPT_BY_AN_OBJECT], ids=["alone", "kept-by-an-object"])
def test_an_earlier_item_carries_its_freed_graph_and_is_detached_safely_only_where_nothing_else_holds_the_list(held):
    """The variant: `[-2]` is the previous step's loss. `losses = [s.detach() for s in losses]` makes a new
    list, which the object handed the old one no longer sees."""
    source = _program("(losses[-1] + 0.1 * losses[-2] if i else losses[-1])", held)
    assert not _runs(source)
    assert _gf004(source) == (["safe"] if held is ALONE else ["unsafe"])
