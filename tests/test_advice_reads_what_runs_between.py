"""The advice of a finding on two backwards through one graph follows what runs between them (h87's
review of MPL and FACIL). A learning-rate scheduler's ``step()`` is no second optimizer: GF002 said
"optimizers take turns, detach the shared value for the first loss" where only the student's
optimizer steps, and the first loss must keep its graph. A statement that reads the gradients the
first backward left (FACIL's path integral keeps the unregularised gradients) means that backward
alone: GF010 said "backward the losses together once" there, which would leave nothing to read;
keeping the first graph is the fix. The variants with a second optimizer, or with nothing reading
the gradients, keep the advice they had."""

import pytest

from .one_program import findings_of, run_error

TEACHER_STUDENT = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
teacher, student = nn.Linear(4, 3), nn.Linear(4, 3)
t_opt, s_opt = torch.optim.SGD(teacher.parameters(), lr=0.1), torch.optim.SGD(student.parameters(), lr=0.1)
s_sched = torch.optim.lr_scheduler.StepLR(s_opt, 10)
for step in range(3):
    x_l, y, x_u = torch.randn(8, 4), torch.randint(0, 3, (8,)), torch.randn(8, 4)
    t_logits = teacher(x_u)
    s_logits = student(torch.cat((x_l, x_u)))
    s_loss_old = F.cross_entropy(s_logits[:8], y)
    s_loss = F.cross_entropy(s_logits[8:], t_logits.detach().argmax(-1))
    s_loss.backward()
    s_opt.step()
    STEPPED.step()
    t_loss = F.cross_entropy(t_logits, y) + s_loss_old
    t_loss.backward()
    t_opt.step()
    t_opt.zero_grad()
    s_opt.zero_grad()
"""

PATH_INTEGRAL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
older = [p.detach().clone() + 0.1 for p in model.parameters()]
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
outputs = model(x)
loss = F.cross_entropy(outputs, y)
optimizer.zero_grad()
loss.backward(RETAIN)
BETWEEN
loss = F.cross_entropy(outputs, y) + sum(torch.sum((p - o).pow(2)) for p, o in zip(model.parameters(), older))
optimizer.zero_grad()
loss.backward()
optimizer.step()
"""
SECOND_BACKWARD = "backward through the graph a second time"


@pytest.mark.parametrize(
    ("stepped", "advice"),
    [
        ("s_sched", "an optimizer steps between them, so recompute the shared value after the step"),
        ("t_opt", "optimizers take turns between them"),
    ],
    ids=["scheduler", "second-optimizer"],
)
def test_only_optimizers_take_turns(stepped, advice, runs, tmp_path):
    source = TEACHER_STUDENT.replace("STEPPED", stepped)
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF002")
    assert len(found) == 1 and advice in found[0].message


def test_gradients_read_between_the_backwards_mean_the_first_alone(runs, tmp_path):
    reading = "unregularised = [p.grad.clone() for p in model.parameters()]"
    source = PATH_INTEGRAL.replace("RETAIN", "").replace("BETWEEN", reading)
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF010", hints=False)
    assert len(found) == 1
    assert "line 14 reads the gradients that backward left" in found[0].message
    assert "keep its graph there (retain_graph=True)" in found[0].message
    assert run_error(runs, tmp_path, source.replace("loss.backward()\nunregularised", "loss.backward(retain_graph=True)\nunregularised")) == ""


def test_without_a_read_between_the_losses_are_backwarded_together(runs, tmp_path):
    source = PATH_INTEGRAL.replace("RETAIN", "").replace("BETWEEN", "print(step := 1)")
    assert SECOND_BACKWARD in run_error(runs, tmp_path, source)
    found = findings_of(source, "GF010", hints=False)
    assert len(found) == 1 and "backward the losses together once" in found[0].message
