"""``run_loss.append(loss)`` keeps every step's graph where ``run_loss`` is a list; where it is an
object of a class gradfix did not read (monai's ``CumulativeAverage``, whose ``append`` keeps a
detached copy: Project-MONAI/tutorials, h108) what its ``append`` keeps is not known, and GF007
only hints. A list made before the loop is reported and fixed."""

import pytest

from gradfix.codemods.report import FixKind

from .one_program import findings_of

PROGRAM = """\
import torch
import torch.nn as nn
from monai.metrics import CumulativeAverage

torch.manual_seed(0)
model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
run_loss = STORE
for step in range(3):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(torch.randn(3, 4)), torch.randn(3, 2))
    loss.backward()
    optimizer.step()
    run_loss.append(loss)
print(type(run_loss).__name__)
"""


@pytest.mark.parametrize(
    ("store", "hint", "fix"), [("[]", False, FixKind.SAFE), ("list()", False, FixKind.SAFE), ("CumulativeAverage()", True, None)]
)
def test_an_append_keeps_its_argument_for_certain_on_a_list(store, hint, fix):
    (found,) = findings_of(PROGRAM.replace("STORE", store), "GF007")
    assert (found.hint, found.fix) == (hint, fix)
