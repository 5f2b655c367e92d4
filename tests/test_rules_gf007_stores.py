"""GF007 through the stores it reads beyond a name: an item of a dict summed with ``+=``."""

import pytest

from gradfix.codemods.check import check_source
from gradfix.codemods.registry import all_rules
from gradfix.codemods.report import FixMode

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"

# https://github.com/leftthomas/SRGAN/blob/master/train.py (its running results, without `.item()`)
RUNNING_RESULTS = (
    HEADER
    + """\
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
running_results = {"batch_sizes": 0, "g_loss": 0}
for step in range(20):
    x = torch.randn(16, 8)
    g_loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    g_loss.backward()
    optimizer.step()
STORE
print(float(running_results["g_loss"]))
"""
)


def _verdict(source: str) -> str:
    """ "fixed", "reported" or "silent", for GF007 with the safe fixes."""
    report = check_source(source.encode(), all_rules(), FixMode.SAFE, "train.py")
    if any(f.code == "GF007" for f in report.fixed):
        return "fixed"
    return "reported" if any(f.code == "GF007" for f in report.findings) else "silent"


@pytest.mark.parametrize(
    ("store", "verdict"),
    [
        ('    running_results["g_loss"] += g_loss * x.size(0)', "fixed"),  # `+=` adds to the item: every step's graph
        ('    running_results["g_loss"] = running_results["g_loss"] + g_loss', "fixed"),  # the same sum, written out
        ('    running_results["g_loss"] = running_results["g_loss"] + g_loss * x.size(0)', "fixed"),
        ('    running_results["g_loss"] = g_loss', "silent"),  # the same key replaces: one step's graph
        ('    running_results["g_loss"] += g_loss.item() * x.size(0)', "silent"),  # a number
        ('    with torch.no_grad():\n        running_results["g_loss"] += g_loss * x.size(0)', "silent"),  # no graph recorded
        # the fact the fix rests on, hidden: code reads autograd's bookkeeping of what the sum holds
        ('    running_results["g_loss"] += g_loss\n    print(running_results["g_loss"].grad_fn)', "reported"),
    ],
)
def test_gf007_an_item_of_a_dict_summed_with_augmented_assignment(store, verdict):
    assert _verdict(RUNNING_RESULTS.replace("STORE", store)) == verdict
