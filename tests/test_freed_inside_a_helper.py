"""GF010 reports, in the default output, a loss built on a graph that a backward inside a helper of the file
freed only where that helper's backward runs on every path to its return: a statement of its own body,
before every ``return``. A backward under the helper's flag (``compute(x, do_backward=False)``), after an
early return or in a loop of it may not run on the path the call takes: a hint (h80's generator)."""

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
x = torch.randn(5, 4)


def compute(v, do_backward):
    loss = model(v).pow(2).sum()
BACKWARD
    return loss * 1.0


for step in range(2):
    opt.zero_grad()
    loss = compute(x, False)
    loss.backward()
    opt.step()
"""


def _gf010(source: str) -> list[bool]:
    """Whether each GF010 finding is a hint."""
    return [f.hint for f in gradfix.check(source, hints=True).findings if f.code == "GF010"]


def _runs(source: str) -> bool:
    return subprocess.run([sys.executable, "-c", source], capture_output=True, timeout=300).returncode == 0


@pytest.mark.parametrize(
    "backward",
    [
        "    if do_backward:\n        loss.backward()",
        "    if not do_backward:\n        return loss * 1.0\n    loss.backward()",
        "    for _ in range(int(do_backward)):\n        loss.backward()",
    ],
    ids=["under-its-flag", "after-an-early-return", "in-a-loop"],
)
def test_a_backward_the_helper_may_skip_is_a_hint(backward):
    source = PROGRAM.replace("BACKWARD", backward)
    assert _runs(source)
    assert _gf010(source) == [True]


def test_the_variant_whose_helper_always_backwards_is_reported():
    source = PROGRAM.replace("BACKWARD", "    loss.backward()")
    assert not _runs(source)
    assert _gf010(source) == [False]
