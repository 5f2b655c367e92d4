"""GF004 through an item of a dict: a sum kept in ``running["g_loss"]`` across iterations, backwarded
every few steps and reset after its backward, carries no graph into the next backward, as a name
rebound after its backward carries none. Each test pairs that program (silent) with the variant
that hides one fact the cut rests on (reported, and raising when run)."""

import sys
import types

import pytest

import gradfix

PROGRAM = """\
import torch
import torch.nn as nn
{imports}
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
running = {{"n": 0, "g_loss": 0, "d_loss": 0}}
for step in range(20):
    g_loss = model(torch.randn(16, 8)).pow(2).mean()
    optimizer.zero_grad()
{body}
    optimizer.step()
print(float(running["g_loss"]))
"""
SUMMED = '    running["g_loss"] += g_loss\n'


def _program(body: str, imports: str = "") -> str:
    return PROGRAM.format(imports=imports, body=body)


def _reset_after_backward(value: str = "0") -> str:
    return SUMMED + f'    if step % 5 == 4:\n        running["g_loss"].backward()\n        running["g_loss"] = {value}\n'


RESET = _program(_reset_after_backward())


@pytest.fixture(autouse=True)
def _accumulators(monkeypatch):
    """``accumulators``, a package gradfix does not read: its ``restart`` keeps the graph it is given."""
    module = types.ModuleType("accumulators")
    module.restart = lambda value: value * 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "accumulators", module)


def _found(source: str) -> list[tuple[str, bool]]:
    return [(f.code, f.hint) for f in gradfix.check(source, hints=True).findings]


def _runs(source: str) -> bool:
    try:
        exec(source, {})
    except RuntimeError as error:
        assert "backward through the graph a second time" in str(error)
        return False
    return True


def _silent_and_reported(variant: str, hint: bool = False) -> None:
    """The program reset after its backward runs and is silent; ``variant`` raises and is reported
    (as a hint where what it carries comes out of code gradfix did not read)."""
    assert _runs(RESET) and _found(RESET) == []
    assert not _runs(variant)
    assert _found(variant) == [("GF004", hint)]


def test_the_item_reset_after_its_backward_carries_no_graph():
    assert _runs(RESET) and _found(RESET) == []
    as_float = _program(_reset_after_backward("0.0"))
    assert _runs(as_float) and _found(as_float) == []
    # (as a name rebound after its backward does: the mechanism the item's reset now shares)
    name = RESET.replace('running["g_loss"]', "total").replace("running = {", "total = 0\nrunning = {")
    assert _runs(name) and _found(name) == []


def test_another_item_reset_leaves_the_graph_in_the_one_backwarded():
    _silent_and_reported(_program(SUMMED + '    if step % 5 == 4:\n        running["g_loss"].backward()\n        running["n"] = 0\n'))


def test_an_item_picked_by_a_key_that_changes_may_be_another_one():
    body = '    key = "g_loss" if step < 10 else "n"\n' + SUMMED
    body += '    if step % 5 == 4:\n        running["g_loss"].backward()\n        running[key] = 0\n'
    _silent_and_reported(_program(body))


def test_an_item_reset_to_what_code_gradfix_does_not_read_returns_may_hold_the_graph():
    reset = _program(_reset_after_backward('restart(running["g_loss"])'), imports="from accumulators import restart")
    _silent_and_reported(reset, hint=True)


def test_another_item_that_sums_the_graph_too_and_is_never_reset_carries_it():
    body = SUMMED + '    running["d_loss"] += 0.5 * g_loss\n'
    body += '    if step % 5 == 4:\n        (running["g_loss"] + running["d_loss"]).backward()\n        running["g_loss"] = 0\n'
    _silent_and_reported(_program(body))


def test_an_item_reset_before_its_backward_carries_the_backwarded_graph():
    _silent_and_reported(_program('    if step % 5 == 4:\n        running["g_loss"] = 0\n' + SUMMED + '    running["g_loss"].backward()\n'))


def test_a_dict_with_another_name_may_hold_a_graph_in_any_item():
    body = "    log = running\n" + SUMMED + '    log["d_loss"] += g_loss\n'
    body += '    if step % 5 == 4:\n        (running["g_loss"] + running["d_loss"]).backward()\n        running["g_loss"] = 0\n'
    _silent_and_reported(_program(body))


def test_another_item_a_tensor_given_a_graph_in_place_through_another_name_may_hold_it():
    # (a tensor with no graph is not proved to keep none: ``add_`` through another name gives it one)
    body = SUMMED + '    d = running["d_loss"]\n    d.add_(0.5 * g_loss)\n'
    body += '    if step % 5 == 4:\n        (running["g_loss"] + running["d_loss"]).backward()\n        running["g_loss"] = 0\n'
    _silent_and_reported(_program(body).replace("for step", 'running["d_loss"] = torch.zeros(())\nfor step'))


def test_another_item_a_previous_iteration_gave_a_graph_is_held_where_the_next_resets():
    # (written after the reset: where the next iteration resets, it holds what the last one left)
    body = SUMMED + '    if step % 5 == 4:\n        (running["g_loss"] + running["d_loss"]).backward()\n        running["g_loss"] = 0\n'
    body += '    d_loss = model(torch.randn(16, 8)).abs().mean()\n    running["d_loss"] = running["d_loss"] + d_loss\n'
    _silent_and_reported(_program(body))


def test_an_item_another_function_writes_may_hold_a_graph():
    # (the dict is written out in one scope and written in another: its items are not all seen together)
    body = SUMMED + "    tally(0.5 * g_loss)\n"
    body += '    if step % 5 == 4:\n        (running["g_loss"] + running["d_loss"]).backward()\n        running["g_loss"] = 0\n'
    tally = 'def tally(value):\n    running["d_loss"] = running["d_loss"] + value\n\n\nfor step'
    variant = _program(body).replace("for step", tally)
    assert _runs(RESET) and _found(RESET) == []
    assert not _runs(variant)
    assert ("GF004", False) in _found(variant)
