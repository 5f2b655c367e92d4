"""A parameter rebound before any read on every path, or never read, reaches nothing of what a
call returns: the state a loop hands back to a model whose ``forward`` starts it afresh carries no
graph into the next backward (``forward(self, x, hidden=None)`` that never reads ``hidden``). A
read of it, on any path, anywhere gradfix does not follow, keeps it."""

import subprocess
import sys

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

PROGRAM = """\
import operator
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 4, 1)

    def forward(self, x, hidden=None, carry=True):
FORWARD

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randn(5, 3)
for i, d in enumerate(data):
    loss, hidden = CALL
    opt.zero_grad()
    loss.backward()
    opt.step()
print("ran", loss.item())
"""
CALL = "model(d, hidden if i else None)"
RUN = "        out, hidden = self.gru(x.view(1, 1, -1), hidden)\n        return out.sum(), hidden"
FRESH = "        hidden = torch.zeros(1, 1, 4)\n"


def _program(forward: str, call: str = CALL) -> str:
    return PROGRAM.replace("FORWARD\n", forward + "\n").replace("CALL", call)


# The same loop in a method of a module that holds the model (``self.net(...)``: a submodule's call).
IN_A_METHOD = """\
class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = Net()

    def fit(self, data):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        for i, d in enumerate(data):
            loss, hidden = self.net(d, hidden if i else None)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return loss


loss = Outer().fit(torch.randn(5, 3))
print("ran", loss.item())
"""


def _in_a_method(forward: str) -> str:
    source = _program(forward)
    return source[: source.index("model = Net()")] + IN_A_METHOD


def _found(source: str) -> str:
    found = [f for f in check_source(source.encode(), all_rules(), FixMode.NONE, "train.py").findings if f.code == "GF004"]
    return "silent" if not found else "hint" if all(f.hint for f in found) else "reported"


def _runs(source: str) -> bool:
    run = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 or "backward through the graph a second time" in run.stderr, run.stderr
    return run.returncode == 0


STARTS_AFRESH = {
    "never read": "        out, hidden = self.gru(x.view(1, 1, -1))\n        return out.sum(), hidden",
    "rebound first": FRESH + RUN,
    "replaced where not None (if-expression)": "        hidden = torch.zeros(1, 1, 4) if hidden is not None else hidden\n" + RUN,
    "replaced where not None (if statement)": "        if hidden is not None:\n            hidden = torch.zeros(1, 1, 4)\n" + RUN,
    "replaced on both paths": "        if carry:\n            hidden = torch.zeros(1, 1, 4)\n        else:\n            hidden = torch.ones(1, 1, 4)\n"
    + RUN,
}


@pytest.mark.parametrize("forward", STARTS_AFRESH.values(), ids=STARTS_AFRESH.keys())
@pytest.mark.parametrize("call", [CALL, "model(d, hidden=hidden if i else None)", "model.forward(d, hidden if i else None)"])
def test_a_state_the_forward_starts_afresh_carries_no_graph(forward, call):
    source = _program(forward, call)
    assert _found(source) == "silent"
    assert call != CALL or _runs(source)  # (each backward walks its own graph: the program runs)


HIDDEN_FACTS = {
    # the state's graph reaches the loss: each variant hides one fact the silent ones rest on
    "replaced where None": "        hidden = torch.zeros(1, 1, 4) if hidden is None else hidden\n" + RUN,
    "handed to code gradfix did not read first": "        kept = operator.getitem([hidden], 0)\n"
    + FRESH
    + "        out, hidden = self.gru(x.view(1, 1, -1), hidden)\n"
    + "        return out.sum() if kept is None else out.sum() + kept.sum(), hidden",
    "read on one path": "        if carry and hidden is not None:\n            x = x + hidden.sum()\n" + FRESH + RUN,
    "replaced on one path": "        if not carry:\n            hidden = torch.zeros(1, 1, 4)\n" + RUN,
    "kept on self": "        if hidden is not None:\n            self.prev = hidden\n"
    + FRESH
    + "        out, hidden = self.gru(x.view(1, 1, -1), hidden)\n"
    + "        return out.sum() + self.prev.sum() if hasattr(self, 'prev') else out.sum(), hidden",
    "read by a nested function": "        def before():\n            return hidden\n\n        kept = before()\n"
    + FRESH
    + "        out, hidden = self.gru(x.view(1, 1, -1), hidden)\n"
    + "        return out.sum() if kept is None else out.sum() + kept.sum(), hidden",
    "read by locals()": "        kept = locals()['hidden']\n"
    + FRESH
    + "        out, hidden = self.gru(x.view(1, 1, -1), hidden)\n"
    + "        return out.sum() if kept is None else out.sum() + kept.sum(), hidden",
}


@pytest.mark.parametrize("forward", HIDDEN_FACTS.values(), ids=HIDDEN_FACTS.keys())
def test_a_state_the_forward_may_read_stays_reported(forward):
    source = _program(forward)
    assert _found(source) == "reported"
    assert not _runs(source)


@pytest.mark.parametrize(
    ("forward", "found"), [(STARTS_AFRESH["never read"], "silent"), (HIDDEN_FACTS["replaced where None"], "reported")], ids=["afresh", "read"]
)
def test_a_submodule_call_reads_the_same_fact(forward, found):
    source = _in_a_method(forward)
    assert _found(source) == found
    assert _runs(source) is (found == "silent")


def test_a_forward_hook_may_return_what_the_call_was_given():
    """The forward never reads the state, but a hook of the model adds it to the loss."""
    hook = "model.register_forward_hook(lambda m, args, out: out if args[1] is None else (out[0] + args[1].sum(), out[1]))\n"
    source = _program(STARTS_AFRESH["never read"]).replace("opt = torch.optim", hook + "opt = torch.optim", 1)
    assert _found(source) == "reported"
    assert not _runs(source)
