"""A call handed straight to a function of the file (``normalize_l2(torch.autograd.grad(loss, x)[0])``,
hendrycks/pre-training's PGD attack, h106) is evaluated once, as Python does: its backward is
recorded once. The reading of the function's summary evaluated the arguments, handed the call back
to be read as any other, and that reading evaluated them again: GF001 reported the one
``autograd.grad`` as backwarding its loss a second time, "first at" its own line. Written twice,
the grad of one loss fails, and is reported."""

from .one_program import findings_of, run_error

PROGRAM = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def normalize_l2(x):
    norm = torch.norm(x.view(x.size(0), -1), p=2, dim=1)
    return x / norm.unsqueeze(-1)


torch.manual_seed(0)
model = nn.Linear(4, 3)
x, y = torch.rand(5, 4), torch.randint(0, 3, (5,))
adv = x.clone().requires_grad_()
for _ in range(3):
    loss = F.cross_entropy(model(adv * 2 - 1), y, reduction="sum")
    GRAD
    adv = (adv + 0.1 * grad).clamp(0, 1).detach().requires_grad_()
print(round(float(adv.sum()), 5))
"""


def test_a_backward_handed_straight_to_a_function_of_the_file_runs_once(runs, tmp_path):
    source = PROGRAM.replace("GRAD", "grad = normalize_l2(torch.autograd.grad(loss, adv)[0])")
    assert run_error(runs, tmp_path, source) == ""
    assert findings_of(source, "GF001", "GF010") == []


def test_the_same_grad_taken_twice_is_reported(runs, tmp_path):
    source = PROGRAM.replace("GRAD", "grad = normalize_l2(torch.autograd.grad(loss, adv)[0]) + torch.autograd.grad(loss, adv)[0]")
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert [f.hint for f in findings_of(source, "GF001")] == [False]
