"""Every rule's declared metadata and documentation example hold: `explain` shows what `fix` does."""

import pytest

from gradfix.codemods.engine import FixMode, check_source
from gradfix.codemods.registry import all_rules, select_rules

RULES = all_rules()
HEADER = b"import torch\nimport torch.nn as nn\n"


@pytest.mark.parametrize("rule", RULES, ids=[r.CODE for r in RULES])
def test_example_before_is_rewritten_into_example_after(rule):
    before = HEADER + rule.EXAMPLE_BEFORE.encode()
    report = check_source(before, [rule], FixMode.UNSAFE if rule.FIX and rule.FIX.value == "unsafe" else FixMode.SAFE)
    assert [f.code for f in report.fixed] == [rule.CODE]
    assert report.rewritten == HEADER + rule.EXAMPLE_AFTER.encode()


@pytest.mark.parametrize("rule", RULES, ids=[r.CODE for r in RULES])
def test_metadata(rule):
    assert rule.CODE.startswith("GF") and len(rule.CODE) == 5
    assert rule.__module__.rsplit(".", 1)[1] == rule.NAME
    assert rule.SUMMARY and len(rule.documentation().splitlines()) > 5


def test_codes_are_unique_and_prefix_selection_works():
    codes = [rule.CODE for rule in RULES]
    assert len(codes) == len(set(codes))
    assert [r.CODE for r in select_rules(["gf002"])] == ["GF002"]
    assert [r.CODE for r in select_rules(None, ["GF002"])] == [c for c in codes if c != "GF002"]


def _findings(code: str, mode=FixMode.SAFE):
    return check_source(HEADER + code.encode(), all_rules(), mode, "train.py")


def test_a_call_wrapping_an_optimizer_step_between_backwards_is_no_internal_error():
    report = _findings(
        "encoder = nn.Linear(3, 4)\nhead_a, head_b = nn.Linear(4, 1), nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(encoder.parameters(), lr=0.1)\nlog = print\n"
        "z = encoder(torch.ones(3))\nloss_a = head_a(z).sum()\nloss_b = head_b(z).sum()\n"
        "loss_a.backward()\nlog(optimizer.step())\nloss_b.backward()\n",
        FixMode.UNSAFE,
    )
    assert report.internal_errors == [] and report.rewritten is None
    assert [f.code for f in report.findings] == ["GF002"]


def test_a_reset_in_an_unrelated_class_does_not_silence_carried_state():
    code = (
        "class Cell(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.rnn = nn.RNNCell(2, 2)\n"
        "        self.state = torch.zeros(1, 2)\n"
        "    def forward(self, x):\n        self.state = self.rnn(x, self.state)\n        return self.state\n"
        "class Logger:\n    def reset(self):\n        self.state = None\n"
        "cell = Cell()\nfor x in torch.ones(3, 1, 2):\n    cell(x).sum().backward()\n"
    )
    assert "GF004" in [f.code for f in _findings(code).findings + _findings(code).fixed]


def test_accelerator_and_fabric_backward_are_never_read_as_a_tensor_backwarded_twice():
    code = (
        "from accelerate import Accelerator\naccelerator = Accelerator()\n"
        "gen, disc = nn.Linear(2, 2), nn.Linear(2, 1)\n"
        "for x in torch.ones(3, 2):\n"
        "    d_loss = disc(gen(x).detach()).sum()\n    accelerator.backward(d_loss)\n"
        "    g_loss = -disc(gen(x)).sum()\n    accelerator.backward(g_loss)\n"
    )
    report = _findings(code, FixMode.UNSAFE)
    assert report.findings == [] and report.rewritten is None
