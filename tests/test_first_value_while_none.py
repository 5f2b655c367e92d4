"""A running total that starts as None and takes the first loss as it is (``if total is None:
total = loss`` / ``else: total = total + loss``, RecBole's trainer shape, h109) is given its first
value once: every later iteration adds to it, and it keeps every step's graph. GF007 read the
first arm as a reset under a condition and only hinted. Each variant hides one fact (a write that
may make the total None again, a write that does not add to it, a test other than ``is None``):
a reset may then run again, and only a hint is left."""

import pytest

from gradfix.codemods.report import FixKind

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
total = None
for step in range(4):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if TEST:
        total = loss
    else:
        total = ADDED
    EXTRA
print(round(float(total), 5))
"""


def _program(test: str = "total is None", added: str = "total + loss", extra: str = "pass") -> str:
    return PROGRAM.replace("TEST", test).replace("ADDED", added).replace("EXTRA", extra)


@pytest.mark.parametrize("swapped", [False, True])
def test_a_total_given_its_first_value_while_none_keeps_every_graph(swapped, runs, tmp_path):
    source = _program()
    if swapped:  # (``if total is not None: total = total + loss`` / ``else: total = loss``)
        source = (
            source.replace("total = loss", "total = SWAP")
            .replace("total = total + loss", "total = loss")
            .replace("total = SWAP", "total = total + loss")
        )
        source = source.replace("if total is None:", "if total is not None:")
    assert run_error(runs, tmp_path, source) == ""
    found = findings_of(source, "GF007")
    assert [(f.hint, f.fix) for f in found] == [(False, FixKind.SAFE)]


@pytest.mark.parametrize(
    ("test", "added", "extra"),
    [
        ("total is None", "total + loss", "if step == 2:\n        total = None"),  # made None again
        ("total is None", "torch.maximum(total, loss)", "pass"),  # a write that does not add to it
        ("not total", "total + loss", "pass"),  # a test other than ``is None``
    ],
)
def test_a_total_that_may_be_made_anew_again_is_a_hint(test, added, extra):
    assert [f.hint for f in findings_of(_program(), "GF007")] == [False]  # (without the variant)
    found = findings_of(_program(test, added, extra), "GF007")
    assert all(f.hint or f.fix is None for f in found)
