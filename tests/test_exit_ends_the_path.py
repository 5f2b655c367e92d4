"""``exit()``, ``sys.exit(...)`` and their kin never return (``EXITING_FUNCTIONS``): an ``except``
branch that ends in one reaches nothing after the ``try``, as one that raises does. DIG's
GraphAug runner (https://github.com/divelab/DIG, ``runner_aug_cls.py``) prints the batch and calls
``exit()`` where the forward fails; gradfix took the branch to go on with the previous iteration's
``output``, and a reduction of it got GF004 by default (h103's review). A function of the file
named ``exit``, which returns, still lets the previous iteration's value through."""

import pytest

from .one_program import findings_of, run_error

torch = pytest.importorskip("torch")

RUNNER = """\
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
SHADOW

model = nn.Sequential(nn.Linear(4, 3), nn.LogSoftmax(-1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in [(torch.randn(5, 4), torch.randint(0, 3, (5,))) for _ in range(3)]:
    optimizer.zero_grad()
    try:
        output = model(x)
    except RuntimeError:
        print(x.shape)
        EXIT
    loss = F.nll_loss(output, y)
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize(("imported", "call"), [("", "exit()"), ("", "sys.exit(1)"), ("", "quit()"), ("from sys import exit as leave", "leave(1)")])
def test_a_branch_that_exits_reaches_nothing_after_the_try(runs, tmp_path, imported, call):
    source = RUNNER.replace("SHADOW", imported).replace("EXIT", call)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF004") == []


def test_a_function_of_the_file_named_exit_returns():
    source = RUNNER.replace("SHADOW", "\n\ndef exit():\n    pass\n").replace("EXIT", "exit()")
    assert [f.code for f in findings_of(source, "GF004")] == ["GF004"]
