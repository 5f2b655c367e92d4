"""What a cold check computes, and how often, beyond ``test_analysis_cost``: counted, never timed
(the figures live in benchmarks/check_speed.py)."""

import textwrap

import libcst as cst
import pytest

from gradfix.codemods.analysis import FileAnalysis
from gradfix.codemods.parse import parse_decoded
from gradfix.codemods.registry import all_rules


@pytest.fixture
def visits(monkeypatch):
    """How many nodes LibCST's own walk (``CSTNode.visit``) enters."""
    entered = []
    walk = cst.CSTNode.visit

    def counted(node, visitor):
        entered.append(node)
        return walk(node, visitor)

    monkeypatch.setattr(cst.CSTNode, "visit", counted)
    return entered


# A training loop followed by code that reads what it left, with no backward after it: GF008 reads
# the names each following statement reads and writes, and finds nothing.
TRAINED_THEN_EVALUATED = textwrap.dedent(
    """
    import torch

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
    last = loss.item()
    report = {"loss": last, "weight": model.weight.tolist()}
    print(report)
    """
)


def test_the_statements_after_a_loop_are_read_from_the_module_s_one_walk(visits):
    """GF008 asks what each statement after a loop reads and writes; on a long script that was a
    walk of LibCST's (which rebuilds every node it passes) per statement and loop."""
    data = TRAINED_THEN_EVALUATED.encode()
    analysis = FileAnalysis(parse_decoded(data, "<test>"), {}, data)
    rule = next(rule for rule in all_rules() if rule.CODE == "GF008")
    assert analysis.loops and list(rule(analysis).violations()) == []
    assert visits == []
