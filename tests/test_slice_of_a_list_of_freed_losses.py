"""A slice of a list (``history[-2:]``) holds some of its items: where a backward freed some of the
list's losses, the slice only may hold them. h86's generator: every other step a helper backwards
the mean of the last two losses of a growing history, each pair once, and GF010 reported a freed
graph walked again. The whole list (``history``, ``history[:]``) holds every item, freed ones too:
that program fails, and is reported."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

PROGRAM = """\
import torch
import torch.nn.functional as F
from torch import nn


def flush(opt, pending):
    opt.zero_grad()
    torch.stack(pending).mean().backward()
    opt.step()


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
history = []
for i in range(6):
    x, y = torch.randn(8, 6), torch.randn(8, 1)
    history.append(F.mse_loss(model(x), y))
    if len(history) % 2 == 0:
        flush(opt, PASSED)
"""


def _gf010(source: str) -> list:
    report = check_source(source.encode(), all_rules(), FixMode.NONE, "train.py")
    return [f for f in report.findings if f.code == "GF010"]


def _error(runs, tmp_path, source: str) -> str:
    script = tmp_path / "train.py"
    script.write_text(source)
    result = runs.run(script)
    return "" if result.status == "ok" else result.error_message or result.status


def test_a_slice_only_may_hold_the_freed_losses(runs, tmp_path):
    source = PROGRAM.replace("PASSED", "history[-2:]")
    assert _error(runs, tmp_path, source) == ""
    assert all(f.hint for f in _gf010(source))


@pytest.mark.parametrize("passed", ["history", "history[:]"])
def test_the_whole_list_holds_them(passed, runs, tmp_path):
    source = PROGRAM.replace("PASSED", passed)
    assert "backward through the graph a second time" in _error(runs, tmp_path, source)
    found = _gf010(source)
    assert found and not any(f.hint for f in found)
