"""``torch.set_grad_enabled(training)`` where ``training`` holds False on every path to it (bound to
the literal just before, or in the ``else`` of ``if training:``) turns gradients off as
``set_grad_enabled(False)`` does: h89's generator found GF006 and GF007 reporting a target and
validation losses built under it as keeping graphs (default findings, with needless ``.detach()``
fixes). Bound to True, to what a call returns, or received as a parameter (what the caller passes),
the name may turn them on, and what is built keeps its graph."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
xv, yv = torch.randn(16, 4), torch.randn(16, 1)
history = []
for step in range(4):
    loss = F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    training = FLAG
    with torch.set_grad_enabled(training):
        val = F.mse_loss(model(xv), yv)
    history.append(val)
assert any(v.requires_grad for v in history) is KEEPS
"""


@pytest.mark.parametrize(
    ("flag", "keeps"),
    [("False", False), ("True", True), ("bool(step % 2)", True)],
)
def test_a_grad_mode_named_by_a_variable_bound_to_a_literal(flag, keeps, runs, tmp_path):
    source = PROGRAM.replace("FLAG", flag).replace("KEEPS", str(keeps))
    assert run_error(runs, tmp_path, source) == ""
    assert [f.hint for f in findings_of(source, "GF007")] == ([False] if keeps else [])


def test_a_grad_mode_a_parameter_names_is_what_the_caller_passes(runs, tmp_path):
    """The grad mode a parameter names is what the caller passes, which the function's body does not
    know: the losses a call passing True builds keep their graphs."""
    source = PROGRAM.replace(
        "    training = FLAG\n    with torch.set_grad_enabled(training):\n        val = F.mse_loss(model(xv), yv)\n", "    val = validate(True)\n"
    )
    source = source.replace(
        "history = []\n",
        "history = []\n\n\ndef validate(training):\n    with torch.set_grad_enabled(training):\n        return F.mse_loss(model(xv), yv)\n\n\n",
    ).replace("KEEPS", "True")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF007") != []


TARGET = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
teacher, student = nn.Linear(4, 2), nn.Linear(4, 2)
x = torch.randn(16, 4)
building = False
BETWEEN
with torch.set_grad_enabled(building):
    target = teacher(x)
opt = torch.optim.SGD(student.parameters(), lr=0.1)
for step in range(3):
    loss = F.mse_loss(student(x), target)
    opt.zero_grad()
    loss.backward(retain_graph=True)
    opt.step()
"""


@pytest.mark.parametrize(
    ("between", "fixed"),
    [
        # nothing binds it again: no graph, and the loop's retain_graph=True is needless
        ("", ["GF009"]),
        # a function declaring it global: the target may hold the teacher's graph, detached with the retain dropped
        ("\n\ndef turn_on():\n    global building\n    building = True\n\n\nturn_on()", ["GF006", "GF009"]),
        # the module's namespace handed to code gradfix does not model: nothing is rewritten
        ('globals()["building"] = True', []),
    ],
)
def test_a_name_other_code_may_bind_again_keeps_its_grad_mode_unknown(between, fixed, runs, tmp_path):
    """Where a function of the module declares the name ``global`` (or the module hands its namespace
    to code), what the name held when it was bound is no proof: the target may hold the teacher's
    graph, and the loop's ``retain_graph=True`` is never dropped on its own (that program would fail)."""
    source = TARGET.replace("BETWEEN", between)
    assert run_error(runs, tmp_path, source) == ""
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    assert sorted(f.code for f in report.fixed) == fixed
    if fixed:
        assert report.rewritten is not None and run_error(runs, tmp_path, report.rewritten.decode()) == ""
