"""``model.named_parameters()`` yields pairs of a name and a parameter: a leaf that requires grad
where the module is trained. gradfix read only ``parameters()`` that way, so the ``p`` of
``for n, p in model.named_parameters()`` held no graph, and an EWC penalty (``fisher[n] * (p -
mean[n]) ** 2`` summed over the named parameters) computed once before the batch loop was missed
(h87's review of PyCIL, mutated). Each pair's items are now kept apart: the name holds no graph,
the parameter is a leaf. The penalty hoisted out of the loop fails at its second backward and is
moved back in by GF003's safe fix; the variant whose module gradfix cannot name (built by
``getattr``) is not fixed safely."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixKind, FixMode

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
net = BUILT
fisher = {n: torch.rand_like(p) for n, p in net.named_parameters()}
mean = {n: p.detach().clone() for n, p in net.named_parameters()}


def ewc_penalty():
    loss = 0
    for n, p in net.named_parameters():
        loss += torch.sum(fisher[n] * (p - mean[n]).pow(2)) / 2
    return loss


optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
loader = [(torch.randn(8, 4), torch.randint(0, 3, (8,))) for _ in range(3)]
for epoch in range(2):
    penalty = ewc_penalty()
    for inputs, targets in loader:
        loss = F.cross_entropy(net(inputs), targets) + 100 * penalty
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""
SECOND_BACKWARD = "backward through the graph a second time"


def test_a_penalty_over_named_parameters_computed_before_the_loop_is_moved_into_it(runs, tmp_path):
    source = PROGRAM.replace("BUILT", "nn.Linear(4, 3)")
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    assert [f.code for f in report.fixed] == ["GF003"]
    fixed = report.rewritten.decode()
    assert "    for inputs, targets in loader:\n        penalty = ewc_penalty()\n" in fixed
    assert run_error(runs, tmp_path, fixed) == ""


def test_a_module_gradfix_cannot_name_is_not_fixed_safely(runs, tmp_path):
    source = PROGRAM.replace("BUILT", 'getattr(nn, "Linear")(4, 3)')
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    assert report.fixed == [] and report.rewritten is None
    assert [f.fix for f in findings_of(source, "GF003")] in ([], [FixKind.UNSAFE])


@pytest.mark.parametrize(
    "loop",
    [
        "for n, p in net.named_parameters():\n        print(n.upper())",  # the name: a string, no graph
        "for n, p in net.named_parameters():\n        p.requires_grad_(n.endswith('bias'))",
    ],
    ids=["name-read", "name-tested"],
)
def test_the_name_of_each_pair_holds_no_graph(loop, runs, tmp_path):
    source = PROGRAM.replace("BUILT", "nn.Linear(4, 3)").replace("    penalty = ewc_penalty()\n", f"    {loop}\n    penalty = 0\n")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF003", "GF004", "GF007", "GF010") == []
