"""GF001 removes the second of two backwards of one loss only where what runs between them leaves the
first call's gradients to the step: an optimizer that zeroes them in between (h81's BYOL mutation,
`loss.backward(); optimizer.zero_grad(); loss.backward(); optimizer.step()`) makes the second call
the one whose gradients the step uses, and removing it leaves the step nothing to train on."""

import subprocess
import sys

import pytest

import gradfix

PROGRAM = """\
import torch
import torch.nn as nn

HELPERS
torch.manual_seed(0)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
w0 = model.weight.detach().clone()
for step in range(5):
    loss = FIRST
    BETWEEN
    loss.backward()
    optimizer.step()
print(float((model.weight.detach() - w0).abs().sum()))
"""
# The first backward where the loss is made, or inside a helper that makes and backwards it.
IN_THE_LOOP = "model(torch.randn(8, 4)).pow(2).mean()\n    loss.backward()"
HELPER = "def forward_backward():\n    loss = model(torch.randn(8, 4)).pow(2).mean()\n    loss.backward()\n    return loss\n"


def _program(first: str, between: str, helpers: str = "") -> str:
    return PROGRAM.replace("HELPERS\n", helpers).replace("FIRST", first).replace("    BETWEEN\n", between)


def _gf001(source: str) -> list[str | None]:
    return [f.fix and f.fix.value for f in gradfix.check(source).findings if f.code == "GF001"]


def _weight_moved(source: str) -> float:
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


ZEROED_BY_HAND = "    for p in model.parameters():\n        p.grad = None\n"


@pytest.mark.parametrize("zeroing", ["    optimizer.zero_grad()\n", ZEROED_BY_HAND], ids=["zero_grad", "by-hand"])
@pytest.mark.parametrize(("first", "helpers"), [(IN_THE_LOOP, ""), ("forward_backward()", HELPER)], ids=["same-block", "inside-a-helper"])
def test_a_zero_grad_between_leaves_the_duplicate_unrewritten(first, helpers, zeroing):
    source = _program(first, zeroing, helpers)
    assert _gf001(source) == [None]
    # Why: without its second backward the step finds the gradients zeroed, and nothing trains.
    assert _weight_moved(source.replace("    loss.backward()\n    optimizer.step()", "    optimizer.step()")) == 0.0


@pytest.mark.parametrize(("first", "helpers"), [(IN_THE_LOOP, ""), ("forward_backward()", HELPER)], ids=["same-block", "inside-a-helper"])
def test_the_duplicate_is_removed_safely_where_nothing_between_touches_the_gradients(first, helpers):
    """The variants: nothing between (safe), and the zeroing hidden in code gradfix does not read (unsafe)."""
    assert _gf001(_program(first, "    print(step)\n", helpers)) == ["safe"]
    # (reading the gradients the first call left agrees with keeping them)
    assert _gf001(_program(first, "    norm = sum(p.grad.norm() for p in model.parameters())\n    print(norm.item())\n", helpers)) == ["safe"]
    hidden = "import helpers_elsewhere\n" + helpers
    assert _gf001(_program(first, "    helpers_elsewhere.reset(optimizer)\n", hidden)) == ["unsafe"]
