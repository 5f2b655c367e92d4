"""Two ``if`` statements that test one name against two distinct literals (``if task == "semantic":``
... ``if task == "depth":``, CAGrad's single-task trainer, one forward then one block per task) never
both run where nothing between them changes the name: the backward of each block walks a graph no
other backward of the same pass freed. gradfix paired only ``if flag:`` with ``if not flag:``, and
reported GF010 on the second block (h88's review). A finding is dropped on the equality of any
name or attribute; a rewrite (GF009 dropping a ``retain_graph=True`` that the other block would
need) rests on it only for a variable of the function, whose every write the walk sees. The
variants that hide a fact (``!=`` a third literal, which holds together with the first test; an
attribute, which a call may set; the name bound again between) are reported, or left alone."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .one_program import findings_of, run_error

PROGRAM = """\
import types

import torch
import torch.nn as nn

torch.manual_seed(0)


def criterion(pred, target, task):
    return ((pred - target) ** 2).mean() if task != "semantic" else nn.functional.cross_entropy(pred, target.argmax(1))


def train(model, optimizer, task, opt):
    for step in range(3):
        x, target = torch.randn(8, 4), torch.randn(8, 3)
        pred = model(x)
        optimizer.zero_grad()
        if FIRST:
            loss = criterion(pred, target, task)
            loss.backward(RETAIN)
        BETWEEN
        if SECOND:
            loss = criterion(pred, target, task)
            loss.backward()
        optimizer.step()


for task in ("semantic", "depth", "normal"):
    model = nn.Linear(4, 3)
    train(model, torch.optim.SGD(model.parameters(), lr=0.1), task, types.SimpleNamespace(task=task))
"""
SECOND_BACKWARD = "backward through the graph a second time"


def _program(first: str, second: str, retain: str = "", between: str = "pass") -> str:
    return PROGRAM.replace("FIRST", first).replace("SECOND", second).replace("RETAIN", retain).replace("BETWEEN", between)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ('task == "semantic"', 'task == "depth"'),
        ('"semantic" == task', "task == 'depth'"),  # the literal on either side, either quote
        ('opt.task == "semantic"', 'opt.task == "depth"'),
    ],
    ids=["name", "literal-first", "attribute"],
)
def test_blocks_under_equalities_with_distinct_literals_free_no_graph_of_each_other(first, second, runs, tmp_path):
    source = _program(first, second)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF010") == []


def test_a_test_that_holds_with_the_first_is_reported(runs, tmp_path):
    source = _program('task == "semantic"', 'task != "depth"')
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF010", hints=False)
    assert len(found) == 1 and "already freed" in found[0].message


def test_a_retained_graph_no_other_block_of_the_pass_walks_is_dropped(runs, tmp_path):
    source = _program('task == "semantic"', 'task == "depth"', retain="retain_graph=True")
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    assert [f.code for f in report.fixed] == ["GF009"]
    assert b"retain_graph" not in report.rewritten
    assert run_error(runs, tmp_path, report.rewritten.decode()) == ""


@pytest.mark.parametrize(
    ("first", "second", "between"),
    [
        ('opt.task == "semantic"', 'opt.task == "depth"', "pass"),  # an attribute: a call may set it
        ('task == "semantic"', 'task == "depth"', 'task = "depth" if task == "semantic" else task'),  # bound again between
    ],
    ids=["attribute", "bound-again-between"],
)
def test_a_retained_graph_is_kept_where_the_tests_may_both_hold(first, second, between, runs, tmp_path):
    source = _program(first, second, retain="retain_graph=True", between=between)
    assert findings_of(source, "GF009", mode=FixMode.SAFE) == []
    if between != "pass":  # (both blocks run where the first test held: the second backward walks the kept graph)
        assert run_error(runs, tmp_path, source.replace("retain_graph=True", "")) != ""
