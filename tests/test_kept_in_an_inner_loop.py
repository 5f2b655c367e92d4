"""A store a loop inside a training step adds to keeps every step's graph as one in the step's own
body does: a detector's trainer sums its loss terms into epoch totals with ``for k, v in
loss_dict.items(): totals[k] += v`` (h102's review of
https://github.com/MultimediaTechLab/YOLO/pull/83). GF007 read only the statements
whose innermost loop is the training loop; it reads those of the loops inside it that are no
training steps, and a ``for`` target is bound anew (from its iterable), so the inner loop's ``term``
is not state the step carries on. A total made anew in each step, or a plain number, keeps
nothing."""

import pytest

from .one_program import findings_of, run_error

torch = pytest.importorskip("torch")

TERMS = """\
import torch

model = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
running = [0.0, 0.0]
for step in range(4):
    x = torch.randn(4, 3)
    FRESH
    mse = model(x).pow(2).mean()
    l1 = model(x).abs().mean()
    opt.zero_grad()
    (mse + l1).backward()
    opt.step()
    for i, term in enumerate([mse, l1]):
        STORE
assert not any(isinstance(total, torch.Tensor) and total.grad_fn for total in running), "a graph is kept"
"""


def program(store: str = "running[i] += term", fresh: str = "") -> str:
    return TERMS.replace("STORE", store).replace("    FRESH\n", f"    {fresh}\n" if fresh else "")


def test_a_total_an_inner_loop_adds_to_keeps_every_step(runs, tmp_path):
    assert "a graph is kept" in run_error(runs, tmp_path, program())
    assert [(f.line, f.hint) for f in findings_of(program(), "GF007")] == [(14, False)]
    assert run_error(runs, tmp_path, program("running[i] += term.detach()")) == ""


def test_a_number_keeps_nothing(runs, tmp_path):
    source = program("running[i] += term.item()")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF007") == []


def test_a_total_made_anew_in_each_step_keeps_only_that_steps_graph():
    assert findings_of(program(fresh="running = [0.0, 0.0]"), "GF007") == []
