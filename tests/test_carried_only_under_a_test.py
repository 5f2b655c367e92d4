"""A value an iteration reads before it assigns it only under a test (DeepAR's decoder: ``if t > 0:
inp = mu`` in a time loop that assigns ``mu`` after the read) may never find the previous
iteration's value: the test may be false exactly when that value is there (the time loop's first
pass). Where the test reads the time loop's own counter (``if t > 0:``, ``if t == 0: ... else:``),
the read is in an arm that loop's first pass never takes, after that pass assigned ``mu``: it finds
this iteration's value, and nothing is reported. Under any other test (a flag), whether it is,
gradfix does not evaluate, so the carried graph is only possible: GF004 gives a hint, not a finding
(h85's review found the finding on correct code). The variants that read it
unconditionally, or under a test true wherever that value is there (``mu is not None``, the carrying
loop's own counter above 0), carry it for certain, fail, and are reported."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
cell = nn.LSTMCell(1, 4)
head = nn.Linear(4, 1)
optimizer = torch.optim.SGD(list(cell.parameters()) + list(head.parameters()), lr=0.1)
mu = torch.zeros(2, 1)
for i in range(3):
    x = torch.randn(5, 2, 1)
    h = c = torch.zeros(2, 4)
    loss = 0
    first = True
    for t in range(5):
        READ
        first = False
        h, c = cell(inp, (h, c))
        mu = head(h)
        loss = loss + mu.pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
SECOND_BACKWARD = "backward through the graph a second time"


def _report(source: str):
    return check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")


@pytest.mark.parametrize(
    ("read", "fails"),
    [
        ("inp = x[t] if first else mu", False),
        ("inp = x[t]\n        if t > 0 or i > 0:\n            inp = mu", True),  # the test true where the last value is there
        ("inp = x[t]\n        if i > 1:\n            inp = x[t] + mu", True),  # the counter's test, false in the second iteration
        ("i = t\n        inp = x[t] + mu if i else x[t]", False),  # ``i`` bound again in the body: no counter of the loop
    ],
    ids=["first-flag", "true-on-first-pass", "counter-above-1", "counter-rebound"],
)
def test_a_read_under_a_test_only_may_carry_the_last_iterations_value(read, fails, runs, tmp_path):
    source = PROGRAM.replace("READ", read)
    assert (SECOND_BACKWARD in run_error(runs, tmp_path, source)) is fails
    found = findings_of(source, "GF004", mode=FixMode.SAFE)
    assert len(found) == 1 and found[0].hint
    assert "only under a test" in found[0].message


@pytest.mark.parametrize(
    "read",
    ["inp = x[t]\n        if t > 0:\n            inp = mu", "if t == 0:\n            inp = x[t]\n        else:\n            inp = mu"],
    ids=["t-above-0", "else-arm"],
)
def test_a_read_the_time_loops_first_pass_skips_finds_what_this_iteration_assigned(read, runs, tmp_path):
    source = PROGRAM.replace("READ", read)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF004", mode=FixMode.SAFE) == []


@pytest.mark.parametrize(
    "read",
    [
        "inp = x[t] + mu",
        "inp = x[t] + mu if mu is not None else x[t]",  # the value the last iteration left is a tensor, never None
        "inp = x[t]\n        if i > 0:\n            inp = x[t] + mu",  # true from the second iteration on, where that value is there
        "inp = x[t] + mu if i else x[t]",
    ],
    ids=["no-test", "not-none", "counter-above-0", "counter"],
)
def test_a_read_without_a_test_or_under_one_true_where_it_is_carried_carries_it(read, runs, tmp_path):
    source = PROGRAM.replace("READ", read)
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF004", mode=FixMode.SAFE)
    assert len(found) == 1 and not found[0].hint
    assert run_error(runs, tmp_path, (_report(source).rewritten or b"").decode()) == ""  # its safe fix, the detach, runs
