"""An arm of an ``if`` that only a loop's first iteration takes (``if it > 0: y = y.detach()``
skips to the rest of the body only when ``it`` is 0, in a loop counting from 0 in ``it``) never
finds what a previous iteration left: every name the iteration has not bound again holds what it
held before the loop. The iterative refinement of the team's fixture (``y_hat`` is None before the
first iteration and detached at the top of every later one) read the skipped detach as possibly
skipped later too, and GF010 reported a freed graph on a program that runs (h92's metamorphic
review); a backward under ``if step == 0:`` walks the graph built before the loop once, while it is
fresh, and GF003 proposed a safe rewrite of the correct program. Each variant that hides the fact
(the counter bound again in the body, a ``range`` of the file's own, a step that may count down, a
test that holds in more than the first iteration) fails, and is reported as before."""

import libcst as cst
import pytest

from gradfix.codemods.analysis import FileAnalysis
from gradfix.codemods.analysis.syntax import method_called

from .one_program import findings_of, run_error

HEAD = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
net = nn.Linear(3, 3)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
"""

REFINEMENT = (
    HEAD
    + """\
for batch in range(2):
    x = torch.randn(2, 3)
    y_hat = None
    opt.zero_grad()
    for it in LOOP:
        REBOUND
        if TEST:
            y_hat = y_hat.detach()
        y_hat = net(x) if y_hat is None else net(x) + y_hat
        loss = (y_hat - x).pow(2).mean()
        loss.backward()
    opt.step()
"""
)

SECOND_BACKWARD = "Trying to backward through the graph a second time"


def refinement(loop: str = "range(3)", test: str = "it > 0", rebound: str = "pass") -> str:
    return REFINEMENT.replace("LOOP", loop).replace("TEST", test).replace("REBOUND", rebound)


@pytest.mark.parametrize("test", ["it > 0", "it != 0", "it >= 1", "it"])
def test_a_detach_skipped_only_by_the_first_iteration_is_no_freed_graph(runs, tmp_path, test):
    source = refinement(test=test)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF010", "GF004") == []


@pytest.mark.parametrize(
    "variant",
    [
        {"test": "it > 1"},  # (the second iteration skips the detach too)
        {"rebound": "it = it % 2"},  # (the counter is 0 again in the third iteration)
        {"loop": "[0, 0, 1]"},  # (not a count from 0)
    ],
    ids=["test holds past the first", "counter bound again", "no counter"],
)
def test_a_detach_a_later_iteration_may_skip_stays_reported(runs, tmp_path, variant):
    source = refinement(**variant)
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    [finding] = findings_of(source, "GF010")
    assert not finding.hint


def test_a_range_of_the_files_own_is_no_count_from_zero(runs, tmp_path):
    source = refinement().replace("for batch in", "def range(n):\n    return [0, 0, 1]\n\n\nfor batch in")
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    [finding] = findings_of(source, "GF010")
    assert not finding.hint


def test_a_step_that_may_count_down_is_no_count_from_zero():
    # (``range(0, n, step)``: a negative step never passes 0, and takes the arm in every iteration)
    source = refinement(loop="range(0, 3, step)").replace("for batch in", "step = int('1')\nfor batch in")
    assert [f.code for f in findings_of(source, "GF010")] == ["GF010"]


def test_enumerates_index_counts_from_zero(runs, tmp_path):
    source = (
        HEAD
        + """\
data = [torch.randn(2, 3) for _ in range(3)]
h = None
for i, x in enumerate(data):
    if i != 0:
        h = h.detach()
    h = net(x) if h is None else net(x) + h
    h.sum().backward()
    opt.step()
"""
    )
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF010", "GF004") == []


FIRST_STEP_ONLY = (
    HEAD
    + """\
x = torch.randn(2, 3)
out = net(x)
for it in range(3):
    if TEST:
        out.sum().backward()
    opt.step()
"""
)


def test_a_backward_in_the_first_iteration_only_walks_the_graph_before_the_loop_fresh(runs, tmp_path):
    source = FIRST_STEP_ONLY.replace("TEST", "it == 0")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF003", "GF010") == []


@pytest.mark.parametrize("test", ["it > 0", "it < 2"])
def test_a_backward_in_more_iterations_walks_it_again(runs, tmp_path, test):
    source = FIRST_STEP_ONLY.replace("TEST", test)
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    assert [f.code for f in findings_of(source, "GF003", hints=False)] == ["GF003"]


@pytest.mark.parametrize(("arm", "first_only"), [("out.sum().backward()", True), ("f = lambda: out.sum().backward()", False)])
def test_code_defined_in_the_first_iteration_may_run_in_a_later_one(arm, first_only):
    source = FIRST_STEP_ONLY.replace("TEST", "it == 0").replace("out.sum().backward()", arm)
    analysis = FileAnalysis(cst.parse_module(source))
    [loop] = analysis.loops
    [backward] = [call for call in analysis.tree.findall(analysis.module, cst.Call) if method_called(call) == "backward"]
    assert analysis.runs_in_the_first_iteration_only(backward, loop) is first_only


def test_a_graph_kept_for_the_first_iterations_backward_keeps_its_retain_graph(runs, tmp_path):
    # The first iteration's second backward walks ``y``'s graph again: the first must keep it.
    source = (
        HEAD
        + """\
x = torch.randn(2, 3)
out = net(x)
for it in range(3):
    y = net(x)
    y.sum().backward(retain_graph=True)
    if it == 0:
        (out + y).sum().backward()
    opt.step()
"""
    )
    assert run_error(runs, tmp_path, source) == ""
    assert run_error(runs, tmp_path, source.replace("retain_graph=True", "")) != ""
    assert findings_of(source, "GF003", "GF009", "GF010") == []


WEIGHTED_SUM = (
    HEAD
    + """\
head = nn.Linear(3, 1)
opt = torch.optim.SGD([*net.parameters(), *head.parameters()], lr=0.1)
for step in range(3):
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    opt.zero_grad()
    rep = net(x)
    START
    for i, weight in enumerate([0.5, 0.5]):
        task_loss = nn.functional.mse_loss(head(rep) * (i + 1), y)
        if i > 0:
            loss = loss + weight * task_loss
        FIRST
    loss.backward()
    opt.step()
"""
)


def test_a_sum_an_inner_loops_first_iteration_starts_carries_nothing(runs, tmp_path):
    # (MultiObjectiveOptimization's MGDA loop, h94: the ``i > 0`` arm adds to what ``i == 0`` made)
    source = WEIGHTED_SUM.replace("START", "pass").replace("FIRST", "else:\n            loss = weight * task_loss")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF004", "GF010") == []


def test_a_sum_no_first_iteration_starts_carries_the_previous_step(runs, tmp_path):
    source = WEIGHTED_SUM.replace("START", "if step == 0:\n        loss = 0").replace("FIRST", "pass")
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    assert [f.code for f in findings_of(source, "GF004", hints=False)] == ["GF004"]
