"""An arm of an ``if`` that ends a loop's body and that only its last iteration takes ends that
iteration and leaves the loop: what it does is never the next iteration's start. CAGrad and MGDA-UB
(nash-mtl's gradient-manipulation methods, h94's review) backward each task's loss keeping the
shared graph for all but the last (``if i < n_tasks - 1: losses[i].backward(retain_graph=True)`` /
``else: losses[i].backward()``): GF010 read the last backward's free as reaching the next
iteration, and reported both backwards on a program that runs. Each variant that hides a fact (the
count bound again in the body, a list the body grows, code after the ``if``, a test that holds
before the last iteration) fails, and is reported as before; and the graph every iteration but the
last keeps is kept (GF009 offers no drop)."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .one_program import findings_of, run_error

PROGRAM = """\
import torch

torch.manual_seed(0)
shared = torch.nn.Linear(4, 4)
head = torch.nn.Linear(4, 3)
optimizer = torch.optim.SGD([*shared.parameters(), *head.parameters()], lr=0.1)
n_tasks = 3
for step in range(3):
    optimizer.zero_grad()
    losses = head(torch.relu(shared(torch.randn(8, 4)))).pow(2).mean(0)
    names = ["a", "b", "c"]
    alias = names
    for LOOP:
        BEFORE
        if TEST:
            losses[i].backward(retain_graph=True)
        else:
            losses[i].backward()
        AFTER
    optimizer.step()
"""
SECOND_BACKWARD = "backward through the graph a second time"


def program(loop: str = "i in range(n_tasks)", test: str = "i < n_tasks - 1", before: str = "pass", after: str = "") -> str:
    """The program, with ``after`` (none by default) after the ``if`` that ends the loop's body."""
    source = PROGRAM.replace("LOOP", loop).replace("TEST", test).replace("BEFORE", before)
    return source.replace("        AFTER\n", f"        {after}\n" if after else "")


@pytest.mark.parametrize(
    ("loop", "test"),
    [
        ("i in range(n_tasks)", "i < n_tasks - 1"),
        ("i in range(0, n_tasks)", "i != (n_tasks - 1)"),
        ("i in range(3)", "i < 2"),
        ("i, loss in enumerate(losses)", "i < len(losses) - 1"),
        ("i in range(len(losses))", "i < len(losses) - 1"),
    ],
)
def test_the_free_of_the_last_iteration_reaches_no_later_backward(runs, tmp_path, loop, test):
    source = program(loop, test)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF010", "GF009") == []


def test_the_arm_taken_only_in_the_last_iteration_is_read_as_such(runs, tmp_path):
    source = program(test="i == n_tasks - 1").replace("backward(retain_graph=True)", "TEMP").replace("backward()", "backward(retain_graph=True)")
    source = source.replace("TEMP", "backward()")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF010", "GF009") == []


@pytest.mark.parametrize(
    "variant",
    [
        {"test": "i < n_tasks - 2"},  # (the second iteration frees it too)
        {"before": "n_tasks = 2"},  # (the count the test reads is not the loop's)
        {"loop": "i in range(len(names))", "test": "i < len(names) - 1", "before": "names.pop() if i == 0 else None"},
        {"loop": "i in range(len(names))", "test": "i < len(names) - 1", "before": "alias.pop() if i == 0 else None"},
    ],
    ids=["test-before-the-last", "count-bound-again", "list-shrunk", "list-shrunk-through-another-name"],
)
def test_a_free_a_later_iteration_may_meet_stays_reported(runs, tmp_path, variant):
    source = program(**variant)
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    assert "GF010" in [f.code for f in findings_of(source, "GF010", hints=False)]


def test_code_after_the_if_runs_in_the_last_iteration_too():
    # (gradfix does not walk it twice, once for the last iteration: the free reaches the head as before)
    assert "GF010" in [f.code for f in findings_of(program(after="print(i)"), "GF010", hints=False)]


def test_a_name_read_as_a_class_base_is_no_count_gradfix_reads():
    # (an argument that is no call's: ``len(names)`` cannot be told unchanged, and nothing breaks)
    source = program(loop="i in range(len(names))", test="i < len(names) - 1", before="class Kind(names):\n            pass")
    assert "class Kind(names):" in source
    report = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py")
    assert report.internal_errors == [] and "GF010" in [f.code for f in report.findings]
