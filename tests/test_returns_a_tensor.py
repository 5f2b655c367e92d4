"""What a call of the file's own function returns is a tensor where every return of that function
hands back one and it cannot end without a return: a tensor method called on the call
(``oscillator(d, w0, x).view(-1, 1)``, the harmonic-oscillator PINN notebook, h91) is then modelled,
not code gradfix did not read, and GF003's fix of the physics residual built once before the loop
is safe. Written ``y = oscillator(d, w0, x); y = y.view(-1, 1)`` it already was. A function of
another module, one that may end without a return (``None``), one under a decorator gradfix does
not read, or a lambda hides that fact: the fix stays unsafe."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

from .one_program import run_error

PROGRAM = """\
import numpy as np
import torch
import torch.nn as nn
from solutions import decorated


SOLUTION


torch.manual_seed(0)
d, w0 = 2, 20
x = torch.linspace(0, 1, 500).view(-1, 1)
y = oscillator(d, w0, x).view(-1, 1)
x_data, y_data = x[0:200:20], y[0:200:20]
x_physics = torch.linspace(0, 1, 30).view(-1, 1).requires_grad_(True)
mu, k = 2 * d, w0**2
model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
yhp = model(x_physics)
dx = torch.autograd.grad(yhp, x_physics, torch.ones_like(yhp), create_graph=True)[0]
dx2 = torch.autograd.grad(dx, x_physics, torch.ones_like(dx), create_graph=True)[0]
for i in range(3):
    optimizer.zero_grad()
    loss1 = torch.mean((model(x_data) - y_data) ** 2)
    loss2 = (1e-4) * torch.mean((dx2 + mu * dx + k * yhp) ** 2)
    loss = loss1 + loss2
    loss.backward()
    optimizer.step()
"""

SOLUTION = """\
def oscillator(d, w0, x):
    w = np.sqrt(w0**2 - d**2)
    phi = np.arctan(-d / w)
    if d == 0:
        return torch.cos(w0 * x)
    return torch.exp(-d * x) * torch.cos(phi + w * x) / np.cos(phi)"""

SOLUTIONS_MODULE = """\
import numpy as np
import torch


def oscillator(d, w0, x):
    w = np.sqrt(w0**2 - d**2)
    return torch.exp(-d * x) * torch.cos(w * x)


def decorated(function):
    return function
"""


def _program(solution: str, tmp_path) -> str:
    (tmp_path / "solutions.py").write_text(SOLUTIONS_MODULE)
    return PROGRAM.replace("SOLUTION", solution)


def _fixed(source: str) -> tuple[list[str], bytes | None]:
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    return [f.code for f in report.fixed], report.rewritten


def test_a_tensor_method_of_a_call_of_a_function_returning_a_tensor_is_read(runs, tmp_path):
    source = _program(SOLUTION, tmp_path)
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    fixed, rewritten = _fixed(source)
    assert fixed == ["GF003"]
    assert rewritten is not None and run_error(runs, tmp_path, rewritten.decode()) == ""


@pytest.mark.parametrize(
    "solution",
    [
        # another module's function: what it returns is not read
        "from solutions import oscillator",
        # it may end without a return: None has no .view
        SOLUTION.replace("    return torch.exp(", "    if d > 0:\n        return torch.exp("),
        # a decorator gradfix does not read may hand back anything
        "@decorated\n" + SOLUTION,
        # a lambda: no function of the file gradfix reads returns it
        "oscillator = lambda d, w0, x: torch.exp(-d * x) * torch.cos(w0 * x)",
    ],
)
def test_a_call_whose_tensor_gradfix_cannot_prove_keeps_the_fix_unsafe(solution, runs, tmp_path):
    source = _program(solution, tmp_path)
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    assert _fixed(source) == ([], None)
    report = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py")
    assert [f.code for f in report.findings] == ["GF003"]
