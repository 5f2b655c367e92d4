"""Points drawn once before the loop (``t = 1 + 3 * torch.rand(n, 1, requires_grad=True)``: a
graph from a leaf the program made) are backwarded through at every iteration, which fails; moving
the statement into the loop runs, but draws new points at every step where the program fitted one
set (h110's fresh script, after a PINN report whose accepted fix makes ``t`` a leaf). GF003 offers
that move only as an unsafe fix. Each variant draws the values another way (a generator, numpy, a
tensor filled in place): still unsafe; points that are no draw (``torch.linspace``) move safely,
and the moved program computes what the accepted fix does."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixKind, FixMode

from .one_program import findings_of, run_error

PROGRAM = """\
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)
generator = torch.Generator().manual_seed(1)
net = nn.Sequential(nn.Linear(2, 12), nn.Tanh(), nn.Linear(12, 1))
opt = torch.optim.Adam(net.parameters(), lr=1e-2)
x = torch.linspace(-1.0, 1.0, 24).reshape(24, 1)
t = 1 + 3 * POINTS
target = torch.sin(3 * x) * torch.exp(-0.3 * t.detach())
for step in range(4):
    u = net(torch.cat([t, x], dim=1))
    loss = torch.mean(torch.square(u - target))
    opt.zero_grad()
    loss.backward()
    opt.step()
print(round(sum(p.detach().sum().item() for p in net.parameters()), 6))
"""
LINSPACE = "torch.linspace(0.0, 1.0, 24, requires_grad=True).reshape(24, 1)"


def _program(points: str) -> str:
    return PROGRAM.replace("POINTS", points)


def _printed(runs, tmp_path, source: str, name: str) -> str:
    script = tmp_path / name
    script.write_text(source)
    result = runs.run(script)
    assert result.status == "ok", result.error_message
    return result.stdout


@pytest.mark.parametrize(
    "points",
    [
        "torch.rand(24, 1, requires_grad=True)",
        "torch.rand(24, 1, generator=generator, requires_grad=True)",
        "torch.from_numpy(np.random.rand(24, 1)).float().requires_grad_()",
        "torch.empty(24, 1).uniform_(0.0, 1.0).requires_grad_()",
    ],
)
def test_points_drawn_once_are_not_moved_safely(points, runs, tmp_path):
    source = _program(points)
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    (found,) = findings_of(source, "GF003")
    assert found.fix is FixKind.UNSAFE and "draws other values at every iteration" in found.message


def test_points_that_are_no_draw_move_safely_and_compute_what_a_leaf_does(runs, tmp_path):
    source = _program(LINSPACE)
    assert "backward through the graph a second time" in run_error(runs, tmp_path, source)
    (found,) = findings_of(source, "GF003")
    assert found.fix is FixKind.SAFE
    moved = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py").rewritten
    assert moved is not None
    as_a_leaf = source.replace(f"t = 1 + 3 * {LINSPACE}", f"t = (1 + 3 * {LINSPACE}).detach().requires_grad_()")
    assert _printed(runs, tmp_path, moved.decode(), "moved.py") == _printed(runs, tmp_path, as_a_leaf, "leaf.py")
