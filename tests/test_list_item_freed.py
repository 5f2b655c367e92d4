"""One item read out of a list the program grows (``KEPT.append(loss)``, then ``KEPT[-1]``) is not told
apart from the list's other items, some of which an earlier backward may have freed: a graph freed
through the list is only may-freed for the item read (an item of a list written out once and never
grown is what the list holds: test_rules_gf010_guessed). h89's generator found GF010 reporting, as a default finding, the
backward of the list's newest loss, whose graph a ``retain_graph=True`` had kept (the program runs).
Without the retain the program fails, and GF010 reports it too, as a hint: which item is read is
what gradfix does not prove either way."""

import pytest

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
KEPT = []


def again():
    (0.5 * KEPT[-1]).backward()


for step in range(3):
    loss = net(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    KEPT.append(loss)
    loss.backward(RETAIN)
    again()
    opt.step()
"""


@pytest.mark.parametrize(("retain", "fails"), [("retain_graph=True", False), ("", True)])
def test_an_item_of_a_list_some_backward_freed_is_only_may_freed(retain, fails, runs, tmp_path):
    source = PROGRAM.replace("RETAIN", retain)
    assert ("backward through the graph a second time" in run_error(runs, tmp_path, source)) is fails
    assert [f.hint for f in findings_of(source, "GF010")] == [True]
