"""A container another name holds too (``alias = store``, ``groups = [store]``, ``buf = t.buf``)
shows what is stored into it (``store.append(loss)``, ``store[k] = loss``, ``store += [loss]``)
through that other name, which the dataflow, whose values are the names', does not follow: what is
stored there escapes, and no backward that may read it again is proved absent."""

import pytest

from .retain_graph_drops import fixed_safely, runs_with_it_dropped

# Each step keeps its loss; code after training may backward a kept loss again (hence the
# step's `retain_graph=True`).
PROGRAM = """\
import torch
from torch import nn

torch.manual_seed(0)
net = nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
BEFORE
def train(batches):
    opt.zero_grad()
    for x in batches:
        loss = net(x).pow(2).mean()
        KEEP
        loss.backward(retain_graph=True)
    opt.step()
    return net.weight.grad.clone()


batches = [torch.randn(3, 4, generator=torch.Generator().manual_seed(i)) for i in range(3)]
print(train(batches))
AFTER
"""


def _program(before: str, keep: str, after: str) -> str:
    return PROGRAM.replace("BEFORE\n", before).replace("KEEP", keep).replace("AFTER\n", after)


def _dropping_runs(source: str) -> bool:
    return runs_with_it_dropped(source, "loss.backward(retain_graph=True)")


@pytest.mark.parametrize(
    ("before", "keep", "after"),
    [
        ("store = []\nalias = store\n", "store.append(loss)", "alias[0].backward()\n"),
        ("store = {}\nalias = store\n", "store['k'] = loss", "alias['k'].backward()\n"),
        ("store = []\nalias = store\n", "global store\n        store += [loss]", "alias[0].backward()\n"),
        ("store = []\ngroups = [store]\n", "store.append(loss)", "groups[0][0].backward()\n"),
        ("class T:\n    def __init__(self):\n        self.buf = []\nt = T()\nbuf = t.buf\n", "buf.append(loss)", "t.buf[0].backward()\n"),
        # handed to code that keeps it: the object then holds the list too; so does the file's own `sorted`
        (
            "held = []\n\ndef sorted(xs):\n    held.append(xs)\n    return xs\n\nstore = []\nsorted(store)\n",
            "store.append(loss)",
            "held[0][0].backward()\n",
        ),
        ("class T:\n    def __init__(self, buf):\n        self.buf = buf\nstore = []\nt = T(store)\n", "store.append(loss)", "t.buf[0].backward()\n"),
    ],
)
def test_a_loss_stored_into_a_container_another_name_holds_escapes(before, keep, after):
    source = _program(before, keep, after)
    assert not fixed_safely(source)
    assert not _dropping_runs(source)


def test_the_variant_with_no_other_name_for_the_container_drops_retain_graph_safely():
    """The alias names another list: nothing kept is backwarded again."""
    source = _program("store = []\nother = []\nalias = other\n", "store.append(loss.item())", "print(len(alias))\n")
    assert fixed_safely(source)
    assert _dropping_runs(source)


def test_a_container_handed_only_to_code_that_reads_it_has_no_other_name():
    """The variant of the object that keeps the list: `len`, `sum` and torch read it and keep nothing."""
    source = _program("store = []\n", "store.append(loss.item())", "print(len(store), sum(store), torch.tensor(store).mean())\n")
    assert fixed_safely(source)
    assert _dropping_runs(source)
