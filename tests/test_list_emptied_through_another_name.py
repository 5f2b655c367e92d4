"""A list of losses emptied in place through another name bound to it (``pending = losses``, then
``del pending[:]`` or ``pending.clear()`` once the window is backwarded) carries no graph into the
next iteration: both names hold one list, and the loop is right. gradfix read the emptying as a
change of ``pending`` only, and reported GF004 on correct code (h83's generator, family
``c_log_list_consumed/alias``). Where the two names are one list for certain (one bound to the
other earlier in a block around the emptying, neither bound anew since), the emptying empties
both. The variants that hide that fact (a copy, a name bound anew in between, an alias made only
under a test) may keep the graphs: a copy is reported, the others are hints (two of them fail
where they run into the next backward)."""

import pytest

from gradfix.codemods.report import FixMode

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
X, Y = torch.randn(16, 4), torch.randn(16, 1)
model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
losses = []
BEFORE
for epoch in range(2):
    for x, y in zip(X.split(4), Y.split(4)):
        losses.append(F.mse_loss(model(x), y))
        if len(losses) >= 2:
            ALIAS
            optimizer.zero_grad()
            torch.stack(pending).mean().backward()
            optimizer.step()
            EMPTY
"""
SECOND_BACKWARD = "backward through the graph a second time"


def _program(alias: str, empty: str, before: str = "") -> str:
    return PROGRAM.replace("BEFORE", before).replace("ALIAS", alias).replace("EMPTY", empty)


@pytest.mark.parametrize(
    ("alias", "empty", "before"),
    [
        ("pending = losses", "del pending[:]", ""),
        ("pending = losses", "pending.clear()", ""),
        ("pending = losses", "pending[:] = []", ""),
        ("pass", "pending.clear()", "pending = losses"),  # bound before the loop, neither bound anew in it
    ],
    ids=["del-slice", "clear", "slice-assigned", "alias-before-the-loop"],
)
def test_a_list_emptied_through_a_name_bound_to_it_carries_nothing(alias, empty, before, runs, tmp_path):
    source = _program(alias, empty, before)
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF004", mode=FixMode.SAFE) == []


def test_a_copy_emptied_leaves_the_list_its_graphs(runs, tmp_path):
    source = _program("pending = list(losses)", "pending.clear()")
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF004", mode=FixMode.SAFE, hints=False)
    assert len(found) == 1 and "`losses` carries the graph of the previous iteration" in found[0].message


@pytest.mark.parametrize(
    "alias",
    [
        "pending = losses\n            losses = losses + []",  # ``losses`` bound anew: ``pending`` holds the old list
        "pending = losses; losses = losses + []",
        "if epoch >= 0:\n                pending = losses",  # where the test is false, ``pending`` holds the last window's list
    ],
    ids=["bound-anew-between", "bound-anew-on-its-line", "alias-under-a-test"],
)
def test_a_list_emptied_through_a_name_that_may_hold_another_is_a_hint(alias, runs, tmp_path):
    source = _program(alias, "pending.clear()")
    fails = "losses + []" in alias
    assert (SECOND_BACKWARD in run_error(runs, tmp_path, source)) is fails
    found = findings_of(source, "GF004", mode=FixMode.SAFE)
    assert len(found) == 1 and found[0].hint
    assert "empties `pending` in place, which may hold the same list as `losses`" in found[0].message


def test_a_list_a_function_may_bind_anew_is_not_emptied_through_its_alias(runs, tmp_path):
    # (``restart`` binds the global ``losses`` to a copy: ``pending`` then holds the old list, and the
    # emptying leaves the copy's graphs; a call between is no binding the block shows)
    restart = "def restart():\n    global losses\n    losses = list(losses)\n\n\n"
    source = restart + _program("pending = losses\n            restart()", "pending.clear()")
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF004", mode=FixMode.SAFE)
    assert len(found) == 1 and "`losses` carries the graph of the previous iteration" in found[0].message
